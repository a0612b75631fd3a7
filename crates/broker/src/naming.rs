//! Server-generated names (`amq.gen-…` queues, `amq.ctag-…` consumer tags), and the clean-up
//! RabbitMQ applies to the names clients give.
//!
//! Randomness comes from a seed handed in by the driver (the core reads no OS entropy), stretched
//! with SplitMix64; names only need to be unique and hard to guess, not cryptographic.

use hourglass_wire::ShortStr;

/// The name without carriage returns and line feeds, when it has any: rabbit_channel strips them
/// from the exchange or queue name of exchange.declare/delete and queue.declare/delete, so a client
/// that declared `"jobs\n"` finds it later as `"jobs"`.
pub(crate) fn without_cr_lf(name: &ShortStr) -> Option<ShortStr> {
    if !name.as_bytes().iter().any(|b| matches!(b, b'\r' | b'\n')) {
        return None;
    }
    let kept: Vec<u8> = name.as_bytes().iter().copied().filter(|b| !matches!(b, b'\r' | b'\n')).collect();
    // Removing bytes never makes a short string longer than it was.
    ShortStr::new(kept.into()).ok()
}

const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

#[derive(Debug)]
pub(crate) struct NameGenerator {
    state: u64,
}

impl NameGenerator {
    pub fn new(seed: u64) -> Self {
        NameGenerator { state: seed }
    }

    /// `amq.gen-` and 22 URL-safe base64 characters (128 random bits), as RabbitMQ names queues.
    pub fn queue_name(&mut self) -> ShortStr {
        self.name("amq.gen-")
    }

    /// `amq.ctag-` and 22 URL-safe base64 characters, as RabbitMQ names consumers.
    pub fn consumer_tag(&mut self) -> ShortStr {
        self.name("amq.ctag-")
    }

    /// 22 URL-safe base64 characters (128 random bits), e.g. for a direct reply-to address.
    pub fn token(&mut self) -> String {
        let mut token = String::with_capacity(22);
        let (a, b) = (self.next_u64(), self.next_u64());
        for i in 0..22u32 {
            let bits = if i < 11 { a >> (i * 6) } else { b >> ((i - 11) * 6) };
            token.push(char::from(URL_SAFE[(bits & 63) as usize]));
        }
        token
    }

    fn name(&mut self, prefix: &str) -> ShortStr {
        // A prefix and 22 characters are far below the 255-byte limit of a shortstr.
        ShortStr::try_from(format!("{prefix}{}", self.token())).unwrap_or_default()
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated names carry RabbitMQ's prefixes and do not repeat.
    #[test]
    fn carriage_returns_and_line_feeds_are_stripped() {
        let name = ShortStr::try_from("jo\r\nbs\n").unwrap();
        assert_eq!(without_cr_lf(&name).unwrap(), "jobs");
        assert!(without_cr_lf(&ShortStr::try_from("jobs").unwrap()).is_none());
    }

    #[test]
    fn names_have_prefix_and_differ() {
        let mut names = NameGenerator::new(7);
        let a = names.queue_name();
        let b = names.queue_name();
        assert!(a.as_str().starts_with("amq.gen-"));
        assert_eq!(a.len(), "amq.gen-".len() + 22);
        assert_ne!(a, b);
        assert!(names.consumer_tag().as_str().starts_with("amq.ctag-"));
    }
}
