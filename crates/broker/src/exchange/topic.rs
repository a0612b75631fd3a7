//! Topic exchange: binding keys are dot-separated words where `*` matches exactly one word and
//! `#` matches zero or more (AMQP 0-9-1 §3.1.3.3, as RabbitMQ implements it).

use std::collections::HashMap;

use super::{Destination, Destinations};

/// The bindings of a topic exchange as a trie of binding-key words, so a publish visits only the
/// branches its routing key can match (literal words by hash lookup, then `*` and `#`) instead of
/// testing every binding.
#[derive(Clone, Debug, Default)]
pub(super) struct TopicTrie {
    root: Node,
}

#[derive(Clone, Debug, Default)]
struct Node {
    /// Children by literal word.
    words: HashMap<Box<[u8]>, Node>,
    /// The `*` child.
    star: Option<Box<Node>>,
    /// The `#` child.
    hash: Option<Box<Node>>,
    /// Destinations of the binding keys that end here (once per binding).
    destinations: Vec<Destination>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.words.is_empty() && self.star.is_none() && self.hash.is_none() && self.destinations.is_empty()
    }
}

impl TopicTrie {
    pub fn insert(&mut self, binding_key: &[u8], destination: &Destination) {
        let mut node = &mut self.root;
        for word in words(binding_key) {
            node = match word {
                b"*" => node.star.get_or_insert_with(Box::default),
                b"#" => node.hash.get_or_insert_with(Box::default),
                literal => node.words.entry(literal.into()).or_default(),
            };
        }
        node.destinations.push(destination.clone());
    }

    /// Removes one binding of `destination` under `binding_key`, pruning emptied branches.
    pub fn remove(&mut self, binding_key: &[u8], destination: &Destination) {
        fn remove_below<'k>(
            node: &mut Node,
            mut rest: impl Iterator<Item = &'k [u8]>,
            destination: &Destination,
        ) {
            let Some(word) = rest.next() else {
                if let Some(at) = node.destinations.iter().position(|d| d == destination) {
                    node.destinations.swap_remove(at);
                }
                return;
            };
            match word {
                b"*" | b"#" => {
                    let slot = if word == b"*" { &mut node.star } else { &mut node.hash };
                    if let Some(child) = slot {
                        remove_below(child, rest, destination);
                        if child.is_empty() {
                            *slot = None;
                        }
                    }
                }
                literal => {
                    if let Some(child) = node.words.get_mut(literal) {
                        remove_below(child, rest, destination);
                        if child.is_empty() {
                            node.words.remove(literal);
                        }
                    }
                }
            }
        }
        remove_below(&mut self.root, words(binding_key), destination);
    }

    /// Appends the destinations of every binding key matching `routing_key` (a destination
    /// bound by several matching keys appears several times; routing de-duplicates).
    pub fn route(&self, routing_key: &[u8], out: &mut Destinations) {
        collect(&self.root, Words::of(routing_key), out);
    }
}

/// The words of a routing key still to match, without allocating: `None` once every word is used
/// (an empty key has no words, as RabbitMQ's split_topic_key; `"a."` has two, `a` and ``).
#[derive(Clone, Copy)]
struct Words<'k>(Option<&'k [u8]>);

impl<'k> Words<'k> {
    fn of(key: &'k [u8]) -> Self {
        Words((!key.is_empty()).then_some(key))
    }

    fn next(self) -> Option<(&'k [u8], Words<'k>)> {
        let rest = self.0?;
        Some(match rest.iter().position(|&b| b == b'.') {
            Some(dot) => (&rest[..dot], Words(Some(&rest[dot + 1..]))),
            None => (rest, Words(None)),
        })
    }
}

fn collect(node: &Node, key: Words<'_>, out: &mut Destinations) {
    if let Some(hash) = &node.hash {
        // `#` swallows zero or more words: try the rest of the pattern after each of them.
        let mut rest = key;
        loop {
            collect(hash, rest, out);
            match rest.next() {
                Some((_, after)) => rest = after,
                None => break,
            }
        }
    }
    match key.next() {
        None => out.extend(node.destinations.iter().cloned()),
        Some((word, rest)) => {
            if let Some(child) = node.words.get(word) {
                collect(child, rest, out);
            }
            if let Some(star) = &node.star {
                collect(star, rest, out);
            }
        }
    }
}

/// Whether `pattern` matches `key`: glob matching over words, where `#` is the star, with one
/// backtrack point (the latest `#`); O(words²) at worst and no allocation. Routing uses the trie;
/// this one-binding matcher is the reference the trie is tested against.
#[cfg(test)]
fn matches(pattern: &[u8], key: &[u8]) -> bool {
    let mut p = words(pattern);
    let mut k = words(key);
    // After the latest `#`: the pattern's rest, and where the key resumes if that fails.
    let mut backtrack = None;
    loop {
        let (mut p_next, mut k_next) = (p.clone(), k.clone());
        match (p_next.next(), k_next.next()) {
            (None, None) => return true,
            (Some(b"#"), _) => {
                backtrack = Some((p_next.clone(), k.clone()));
                p = p_next;
                continue;
            }
            (Some(pw), Some(kw)) if pw == b"*" || pw == kw => {
                (p, k) = (p_next, k_next);
                continue;
            }
            _ => {}
        }
        // Mismatch: let the latest `#` swallow one more key word and retry from there.
        let Some((after_hash, mut resume)) = backtrack.take() else { return false };
        if resume.next().is_none() {
            return false;
        }
        (p, k) = (after_hash.clone(), resume.clone());
        backtrack = Some((after_hash, resume));
    }
}

/// The dot-separated words of a key (binding keys; routing keys use [`Words`]); an empty key has none (RabbitMQ's split_topic_key), so `*`
/// does not match it.
fn words(key: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    let count = if key.is_empty() { 0 } else { usize::MAX };
    key.split(|&b| b == b'.').take(count)
}

#[cfg(test)]
mod tests {
    use super::{matches, TopicTrie};
    use crate::exchange::Destination;

    /// `*` matches exactly one word.
    #[test]
    fn star_matches_one_word() {
        assert!(matches(b"a.*.c", b"a.b.c"));
        assert!(!matches(b"a.*.c", b"a.c"));
        assert!(!matches(b"a.*", b"a.b.c"));
        assert!(matches(b"*", b"word"));
        assert!(!matches(b"*", b""));
    }

    /// `#` matches zero or more words, anywhere in the pattern.
    #[test]
    fn hash_matches_zero_or_more_words() {
        assert!(matches(b"#", b""));
        assert!(matches(b"#", b"a.b.c"));
        assert!(matches(b"a.#", b"a"));
        assert!(matches(b"a.#", b"a.b.c"));
        assert!(matches(b"#.c", b"a.b.c"));
        assert!(matches(b"a.#.c", b"a.c"));
        assert!(matches(b"a.#.c", b"a.x.y.c"));
        assert!(!matches(b"a.#.c", b"a.x.y.d"));
        assert!(matches(b"#.b.#", b"a.b.c"));
        assert!(matches(b"*.#", b"a"));
        assert!(!matches(b"*.#", b""));
    }

    /// Literal words match only themselves; an empty key matches only an empty pattern or `#`.
    #[test]
    fn literal_words_match_exactly() {
        assert!(matches(b"stock.usd.nyse", b"stock.usd.nyse"));
        assert!(!matches(b"stock.usd.nyse", b"stock.eur.nyse"));
        assert!(matches(b"", b""));
        assert!(!matches(b"a", b""));
    }

    /// The matcher agrees with a plain recursive reading of the rules on every pattern of up to
    /// four words from {a, b, *, #} against every key of up to four words from {a, b}.
    #[test]
    fn agrees_with_the_recursive_definition_exhaustively() {
        fn reference(p: &[&str], k: &[&str]) -> bool {
            match p.split_first() {
                None => k.is_empty(),
                Some((&"#", rest)) => (0..=k.len()).any(|skip| reference(rest, &k[skip..])),
                Some((&w, rest)) => k
                    .split_first()
                    .is_some_and(|(&kw, krest)| (w == "*" || w == kw) && reference(rest, krest)),
            }
        }
        fn all(alphabet: &[&'static str], max: usize) -> Vec<Vec<&'static str>> {
            let mut out = vec![vec![]];
            let mut frontier = vec![vec![]];
            for _ in 0..max {
                let next: Vec<Vec<&str>> = frontier
                    .iter()
                    .flat_map(|w: &Vec<&str>| alphabet.iter().map(move |a| [w.clone(), vec![*a]].concat()))
                    .collect();
                out.extend(next.iter().cloned());
                frontier = next;
            }
            out
        }
        for pattern in all(&["a", "b", "*", "#"], 4) {
            for key in all(&["a", "b"], 4) {
                let (p, k) = (pattern.join("."), key.join("."));
                assert_eq!(matches(p.as_bytes(), k.as_bytes()), reference(&pattern, &key), "{p:?} vs {k:?}");
            }
        }
    }

    /// The trie routes exactly as testing every binding with `matches` would: all patterns of up
    /// to three words from {a, b, *, #} bound at once (each to its own destination), against every
    /// key of up to four words from {a, b} — then again after unbinding every other pattern.
    #[test]
    fn trie_agrees_with_matching_every_binding() {
        let alphabet = ["a", "b", "*", "#"];
        let mut patterns = vec![String::new()];
        let mut frontier = vec![String::new()];
        for _ in 0..3 {
            frontier = frontier
                .iter()
                .flat_map(|p| {
                    alphabet
                        .iter()
                        .map(move |w| if p.is_empty() { (*w).to_owned() } else { format!("{p}.{w}") })
                })
                .collect();
            patterns.extend(frontier.iter().cloned());
        }
        let mut keys = vec![String::new(), ".".to_owned(), "a.".to_owned()];
        let mut frontier = vec![String::new()];
        for _ in 0..4 {
            frontier = frontier
                .iter()
                .flat_map(|k| {
                    ["a", "b"]
                        .iter()
                        .map(move |w| if k.is_empty() { (*w).to_owned() } else { format!("{k}.{w}") })
                })
                .collect();
            keys.extend(frontier.iter().cloned());
        }
        let exchange = |i: usize| {
            Destination::Exchange(hourglass_wire::ShortStr::new(bytes::Bytes::from(format!("d{i}"))).unwrap())
        };
        let mut trie = TopicTrie::default();
        for (i, pattern) in patterns.iter().enumerate() {
            trie.insert(pattern.as_bytes(), &exchange(i));
        }
        let check = |trie: &TopicTrie, bound: &dyn Fn(usize) -> bool| {
            for key in &keys {
                let mut routed = super::Destinations::new();
                trie.route(key.as_bytes(), &mut routed);
                let mut routed = routed.into_vec();
                routed.sort_by_key(|d| format!("{d:?}"));
                routed.dedup();
                let mut expected: Vec<Destination> = (0..patterns.len())
                    .filter(|&i| bound(i) && matches(patterns[i].as_bytes(), key.as_bytes()))
                    .map(exchange)
                    .collect();
                expected.sort_by_key(|d| format!("{d:?}"));
                assert_eq!(routed, expected, "key {key:?}");
            }
        };
        check(&trie, &|_| true);
        for (i, pattern) in patterns.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
            trie.remove(pattern.as_bytes(), &exchange(i));
        }
        check(&trie, &|i| i % 2 == 1);
        for (i, pattern) in patterns.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
            trie.remove(pattern.as_bytes(), &exchange(i));
        }
        assert!(trie.root.is_empty(), "unbinding everything leaves an empty trie");
    }
}
