//! RabbitMQ's password hashes: `base64(salt ++ H(salt ++ utf8(password)))` with a 4-byte salt,
//! where H is the user's `hashing_algorithm` — one of the three modules RabbitMQ ships and
//! exports (`rabbit_password_hashing_sha256`, its default since 3.6; `_sha512`; `_md5`, what
//! 3.5 and older used). New passwords are always hashed with SHA-256; a hash imported with
//! another algorithm keeps it (and is exported with it), so its user logs in unchanged.

use base64::Engine;
use md5::Md5;
use sha2::{Digest, Sha256, Sha512};

/// RabbitMQ's salt size for its password hashes.
pub(crate) const SALT_BYTES: usize = 4;

/// The hash function of a stored password.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HashingAlgorithm {
    /// `rabbit_password_hashing_sha256`, RabbitMQ's default and ours for new passwords.
    #[default]
    Sha256,
    /// `rabbit_password_hashing_sha512`.
    Sha512,
    /// `rabbit_password_hashing_md5` (RabbitMQ before 3.6).
    Md5,
}

impl HashingAlgorithm {
    /// RabbitMQ's module name, as definitions carry it.
    pub fn name(self) -> &'static str {
        match self {
            HashingAlgorithm::Sha256 => "rabbit_password_hashing_sha256",
            HashingAlgorithm::Sha512 => "rabbit_password_hashing_sha512",
            HashingAlgorithm::Md5 => "rabbit_password_hashing_md5",
        }
    }

    /// The algorithm a definitions file names; `None` for a module we do not have.
    pub fn parse(name: &str) -> Option<HashingAlgorithm> {
        [HashingAlgorithm::Sha256, HashingAlgorithm::Sha512, HashingAlgorithm::Md5]
            .into_iter()
            .find(|algorithm| algorithm.name() == name)
    }

    /// `base64(salt ++ H(salt ++ password))`.
    pub fn hash_with_salt(self, salt: &[u8], password: &str) -> String {
        let mut out = salt.to_vec();
        match self {
            HashingAlgorithm::Sha256 => {
                out.extend(Sha256::new().chain_update(salt).chain_update(password).finalize())
            }
            HashingAlgorithm::Sha512 => {
                out.extend(Sha512::new().chain_update(salt).chain_update(password).finalize())
            }
            HashingAlgorithm::Md5 => {
                out.extend(Md5::new().chain_update(salt).chain_update(password).finalize())
            }
        }
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    /// Whether `password` matches `stored`; a hash that does not decode, or whose length is not
    /// this algorithm's, matches nothing.
    pub fn verify(self, stored: &str, password: &str) -> bool {
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(stored) else { return false };
        if raw.len() != SALT_BYTES + self.digest_bytes() {
            return false;
        }
        let expected = self.hash_with_salt(&raw[..SALT_BYTES], password);
        constant_time_eq(expected.as_bytes(), stored.as_bytes())
    }

    fn digest_bytes(self) -> usize {
        match self {
            HashingAlgorithm::Sha256 => 32,
            HashingAlgorithm::Sha512 => 64,
            HashingAlgorithm::Md5 => 16,
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each algorithm verifies its own hashes only; names round-trip; unknown names are refused.
    #[test]
    fn each_algorithm_verifies_its_own_hashes() {
        let salt = [1, 2, 3, 4];
        for algorithm in [HashingAlgorithm::Sha256, HashingAlgorithm::Sha512, HashingAlgorithm::Md5] {
            let hash = algorithm.hash_with_salt(&salt, "pässword");
            assert!(algorithm.verify(&hash, "pässword"), "{algorithm:?}");
            assert!(!algorithm.verify(&hash, "password"), "{algorithm:?}");
            assert_eq!(HashingAlgorithm::parse(algorithm.name()), Some(algorithm));
            let others = [HashingAlgorithm::Sha256, HashingAlgorithm::Sha512, HashingAlgorithm::Md5];
            for other in others.into_iter().filter(|o| *o != algorithm) {
                assert!(!other.verify(&hash, "pässword"), "{other:?} took a {algorithm:?} hash");
            }
        }
        assert_eq!(HashingAlgorithm::parse("rabbit_password_hashing_bcrypt"), None);
    }

    /// Known answers: MD5 and SHA-512 of salt ++ password computed independently (Python's
    /// hashlib: `base64(salt + md5(salt + b"test12"))`).
    #[test]
    fn known_answers() {
        let salt = [0x90, 0x8D, 0xC6, 0x0A];
        assert_eq!(
            HashingAlgorithm::Sha256.hash_with_salt(&salt, "test12"),
            "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
        );
        assert_eq!(HashingAlgorithm::Md5.hash_with_salt(&salt, "test12"), MD5_TEST12);
        assert_eq!(HashingAlgorithm::Sha512.hash_with_salt(&salt, "test12"), SHA512_TEST12);
    }

    const MD5_TEST12: &str = "kI3GChNpte2FApYFXScl+0dIluk=";
    const SHA512_TEST12: &str =
        "kI3GChuNuIYf8lRbCCxZjgjKwsY19ns6+uFO0zcXRBGA/XGJPYD8OWMy7EB8TaOmAzjP2azv84GbINYwX2cDWb4DHnc=";
}
