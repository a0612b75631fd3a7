//! Topic exchange: binding keys are dot-separated words where `*` matches exactly one word and
//! `#` matches zero or more (AMQP 0-9-1 §3.1.3.3, as RabbitMQ implements it).
//!
//! Matching is polynomial whatever the bindings: a walk visits each (trie node, word of the routing
//! key) pair at most once, so one publish costs at most (trie nodes) × (words + 1) steps. Without
//! that, every way of splitting the key among the `#`s of a pattern is a separate path:
//! `#.#.#.#.#.#.#.#.b` against a 60-word key is C(60, 8) ≈ 2.6 × 10⁹ paths (issue #12, finding 2).
//! RabbitMQ 3.10 walks every path (rabbit_exchange_type_topic:trie_match) and caps neither the
//! words of a key nor the `#`s of a pattern, so neither is refused here: AMQP's shortstr already
//! keeps a routing or binding key within 255 octets (128 words), and a `CC`/`BCC` key, a long
//! string, costs linear time in its words.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::{Destination, Destinations};

/// The bindings of a topic exchange as a trie of binding-key words, so a publish visits only the
/// branches its routing key can match (literal words by hash lookup, then `*` and `#`) instead of
/// testing every binding. A run of `#` words is stored as one (`#.#` matches what `#` matches: any
/// run of zero or more words).
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
        for word in pattern_words(binding_key) {
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
        remove_below(&mut self.root, pattern_words(binding_key), destination);
    }

    /// Appends the destinations of every binding key matching `routing_key`: each trie node's
    /// once (a destination bound by several matching keys appears several times; routing
    /// de-duplicates).
    pub fn route(&self, routing_key: &[u8], out: &mut Destinations) {
        self.walk(routing_key, out);
    }

    /// [`TopicTrie::route`], returning how many (node, word) steps the walk took.
    fn walk(&self, routing_key: &[u8], out: &mut Destinations) -> usize {
        let mut walk = Walk { out, entered: FxHashMap::default(), steps: 0 };
        walk.collect(&self.root, Words::of(routing_key));
        walk.steps
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

    /// Where the walk is in the key, as a number that shrinks as words are used: 0 once every
    /// word is used, else one more than the octets left (`Some("")`, one empty word, is 1).
    fn remaining(self) -> usize {
        self.0.map_or(0, |rest| rest.len() + 1)
    }
}

/// One routing key's walk down the trie.
struct Walk<'o> {
    out: &'o mut Destinations,
    /// For each `#` node entered so far (by address; the trie does not change during a walk): the
    /// earliest position it was entered at, as [`Words::remaining`]. A `#` node entered at one
    /// position is walked at that one and every later one, so the positions done form a run to
    /// the end of the key, and this one number says which are done.
    entered: FxHashMap<usize, usize>,
    /// (node, position) pairs walked, for the tests' bound.
    steps: usize,
}

impl Walk<'_> {
    fn collect(&mut self, node: &Node, key: Words<'_>) {
        self.steps += 1;
        if let Some(hash) = &node.hash {
            self.enter_hash(hash, key);
        }
        match key.next() {
            None => self.out.extend(node.destinations.iter().cloned()),
            Some((word, rest)) => {
                if let Some(child) = node.words.get(word) {
                    self.collect(child, rest);
                }
                if let Some(star) = &node.star {
                    self.collect(star, rest);
                }
            }
        }
    }

    /// `#` swallows zero or more words: walks `hash` from `key` and from after each further word,
    /// skipping the positions an earlier entry already walked. A node below `hash` cannot lead
    /// back to it, so no other walk of `hash` is under way while this one runs.
    fn enter_hash(&mut self, hash: &Node, key: Words<'_>) {
        let id = std::ptr::from_ref(hash) as usize;
        let done_from = self.entered.get(&id).copied();
        if done_from.is_some_and(|earliest| key.remaining() <= earliest) {
            return;
        }
        self.entered.insert(id, key.remaining());
        let mut rest = key;
        loop {
            if done_from.is_some_and(|earliest| rest.remaining() <= earliest) {
                return;
            }
            self.collect(hash, rest);
            match rest.next() {
                Some((_, after)) => rest = after,
                None => return,
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

/// The dot-separated words of a key (binding keys; routing keys use [`Words`]); an empty key has
/// none (RabbitMQ's split_topic_key), so `*` does not match it.
fn words(key: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    let count = if key.is_empty() { 0 } else { usize::MAX };
    key.split(|&b| b == b'.').take(count)
}

/// A binding key's words as the trie stores them: a `#` right after a `#` is dropped.
fn pattern_words(binding_key: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut after_hash = false;
    words(binding_key).filter(move |&word| {
        let repeat = after_hash && word == b"#";
        after_hash = word == b"#";
        !repeat
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{matches, Node, TopicTrie};
    use crate::exchange::{Destination, Destinations};

    fn exchange(i: usize) -> Destination {
        Destination::Exchange(hourglass_wire::ShortStr::new(bytes::Bytes::from(format!("d{i}"))).unwrap())
    }

    /// What the trie selects for `key`, each destination once, sorted.
    fn routed(trie: &TopicTrie, key: &str) -> Vec<Destination> {
        let mut out = Destinations::new();
        trie.route(key.as_bytes(), &mut out);
        let mut out = out.into_vec();
        out.sort_by_key(|d| format!("{d:?}"));
        out.dedup();
        out
    }

    fn node_count(node: &Node) -> usize {
        1 + node.words.values().map(node_count).sum::<usize>()
            + node.star.as_deref().map_or(0, node_count)
            + node.hash.as_deref().map_or(0, node_count)
    }

    /// The rules read plainly, one binding at a time, exponential at worst: the reference.
    fn reference(p: &[&str], k: &[&str]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((&"#", rest)) => (0..=k.len()).any(|skip| reference(rest, &k[skip..])),
            Some((&w, rest)) => {
                k.split_first().is_some_and(|(&kw, krest)| (w == "*" || w == kw) && reference(rest, krest))
            }
        }
    }

    /// Issue #12 finding 2: a binding of many `#`s and a 60-word routing key routed in a number of
    /// steps bounded by (trie nodes) × (words + 1), not one per way of splitting the key among the
    /// `#`s (C(60, 8) ≈ 2.6 × 10⁹ for eight). Other hostile shapes, matching and not, alongside.
    #[test]
    fn many_hash_words_route_in_polynomial_steps() {
        let patterns =
            ["#.#.#.#.#.#.#.#.b", "#.w1.#.w3.#.#.b", "*.#.*.#.*.#.*.#.b", "#.*.#.*.#.*.#.c", "#.w7.#"];
        let mut trie = TopicTrie::default();
        for (i, pattern) in patterns.iter().enumerate() {
            trie.insert(pattern.as_bytes(), &exchange(i));
        }
        let nodes = node_count(&trie.root);
        for (last, expected) in [("b", vec![0, 1, 2, 4]), ("d", vec![4])] {
            let key = (0..59).map(|i| format!("w{i}")).chain([last.to_owned()]).collect::<Vec<_>>().join(".");
            let mut out = Destinations::new();
            let steps = trie.walk(key.as_bytes(), &mut out);
            assert!(steps <= nodes * 61, "{steps} steps for {nodes} nodes and 60 words");
            let expected: Vec<Destination> = expected.into_iter().map(exchange).collect();
            assert_eq!(routed(&trie, &key), expected, "key ending in {last}");
        }
    }

    /// A run of `#`s is stored as one `#`, and unbinding the longer spelling removes that binding.
    #[test]
    fn runs_of_hash_share_one_node() {
        let mut trie = TopicTrie::default();
        trie.insert(b"a.#.#.#.b", &exchange(1));
        trie.insert(b"a.#.b", &exchange(2));
        assert_eq!(node_count(&trie.root), 4, "root, a, #, b");
        assert_eq!(routed(&trie, "a.b"), vec![exchange(1), exchange(2)]);
        assert_eq!(routed(&trie, "a.x.y.z.b"), vec![exchange(1), exchange(2)]);
        trie.remove(b"a.#.#.#.b", &exchange(1));
        assert_eq!(routed(&trie, "a.x.b"), vec![exchange(2)]);
        trie.remove(b"a.#.b", &exchange(2));
        assert!(trie.root.is_empty());
    }

    /// A walk emits each node's destinations once per routing key, however many paths reach it.
    #[test]
    fn a_node_reached_by_many_paths_is_collected_once() {
        let mut trie = TopicTrie::default();
        trie.insert(b"#.a.#", &exchange(1));
        let mut out = Destinations::new();
        trie.route(b"a.a.a.a.a", &mut out);
        assert_eq!(out.into_vec(), vec![exchange(1)]);
    }

    fn pattern_strategy() -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "", "*", "#"]), 0..7)
    }

    fn key_strategy() -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", ""]), 0..9)
    }

    proptest! {
        /// The trie, with any set of bindings bound and some unbound again, routes exactly as
        /// testing each remaining binding against the plain recursive rules.
        #[test]
        fn trie_routes_as_the_recursive_reference(
            patterns in prop::collection::vec(pattern_strategy(), 1..8),
            keys in prop::collection::vec(key_strategy(), 1..8),
            unbind in prop::collection::vec(any::<bool>(), 8),
        ) {
            let mut trie = TopicTrie::default();
            for (i, pattern) in patterns.iter().enumerate() {
                trie.insert(pattern.join(".").as_bytes(), &exchange(i));
            }
            for (i, pattern) in patterns.iter().enumerate().filter(|&(i, _)| unbind[i]) {
                trie.remove(pattern.join(".").as_bytes(), &exchange(i));
            }
            for key in &keys {
                let joined = key.join(".");
                // An empty key has no words, not one empty word (split_topic_key).
                let key_words: &[&str] = if joined.is_empty() { &[] } else { key };
                let expected: Vec<Destination> = patterns
                    .iter()
                    .enumerate()
                    .filter(|&(i, p)| {
                        let p_words: &[&str] = if p.join(".").is_empty() { &[] } else { p };
                        !unbind[i] && reference(p_words, key_words)
                    })
                    .map(|(i, _)| exchange(i))
                    .collect();
                let mut expected = expected;
                expected.sort_by_key(|d| format!("{d:?}"));
                prop_assert_eq!(routed(&trie, &joined), expected, "key {:?}", joined);
            }
        }
    }

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
