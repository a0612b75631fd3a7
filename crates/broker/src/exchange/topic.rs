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

/// Whether `pattern` matches `key`: glob matching over words with one backtrack point,
/// O(words²) at worst.
pub(crate) fn matches(pattern: &[u8], key: &[u8]) -> bool {
    let pattern = words(pattern);
    let key = words(key);
    // Standard wildcard matching where `#` behaves like `*` in glob matching over words.
    let (mut p, mut k) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while k < key.len() {
        if p < pattern.len() && pattern[p] == b"#" {
            star = Some((p, k));
            p += 1;
        } else if p < pattern.len() && (pattern[p] == b"*" || pattern[p] == key[k]) {
            p += 1;
            k += 1;
        } else if let Some((sp, sk)) = star {
            p = sp + 1;
            k = sk + 1;
            star = Some((sp, sk + 1));
        } else {
            return false;
        }
    }
    while p < pattern.len() && pattern[p] == b"#" {
        p += 1;
    }
    p == pattern.len()
}

/// An empty key has no words (RabbitMQ's split_topic_key), so `*` does not match it.
fn words(key: &[u8]) -> Vec<&[u8]> {
    if key.is_empty() {
        Vec::new()
    } else {
        key.split(|&b| b == b'.').collect()
    }
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
}
