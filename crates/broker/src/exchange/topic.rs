//! Topic exchange: binding keys are dot-separated words where `*` matches exactly one word and
//! `#` matches zero or more (AMQP 0-9-1 §3.1.3.3, as RabbitMQ implements it).

use super::{Binding, Destination};

pub(super) fn route(bindings: &[Binding], routing_key: &[u8], out: &mut Vec<Destination>) {
    out.extend(
        bindings
            .iter()
            .filter(|b| matches(b.routing_key.as_bytes(), routing_key))
            .map(|b| b.destination.clone()),
    );
}

/// Whether `pattern` matches `key`: glob matching over words, where `#` is the star, with one
/// backtrack point (the latest `#`); O(words²) at worst and no allocation.
pub(crate) fn matches(pattern: &[u8], key: &[u8]) -> bool {
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

/// The dot-separated words of a key; an empty key has none (RabbitMQ's split_topic_key), so `*`
/// does not match it.
fn words(key: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    let count = if key.is_empty() { 0 } else { usize::MAX };
    key.split(|&b| b == b'.').take(count)
}

#[cfg(test)]
mod tests {
    use super::matches;

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
}
