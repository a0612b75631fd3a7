//! Access keys for the SQS endpoint (issue 26, ADR 0011): an id, the user it acts as, when it was
//! made, and its secret, sealed. Signature V4 checks an HMAC made with the secret itself, so the
//! broker must be able to read it back: it cannot be hashed like a password. It is sealed with
//! AES-256-GCM under a [`SecretsKey`] kept outside the data directory (`secrets_key_file`), with
//! the key's id and user as associated data, so a copy of the data directory alone does not
//! reveal a secret, and a sealed secret moved to another key or user does not open.
//!
//! The records are the user store's like its users (one catalog entry each, `entries.rs`), so
//! they are durable, replicated in a cluster and gone with their user or their vhost.

use std::io::Write;
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use super::{StoreError, UserStore};

/// Keys one user may hold at once: AWS's two, enough to rotate one without a gap.
pub const ACCESS_KEYS_PER_USER_MAX: usize = 2;
/// An access key id's prefix, as AWS's start with `AKIA`: says whose key it is at a glance.
const ID_PREFIX: &str = "HGAK";
/// What the associated data of a sealed secret starts with.
const SEAL_CONTEXT: &[u8] = b"hourglass access key\0";

/// One access key, its secret sealed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessKeyRecord {
    pub id: String,
    pub user: String,
    /// Unix milliseconds.
    pub created_ms: u64,
    pub sealed: SealedSecret,
    /// The vhost the key's requests act in (its queues are listed and made there); `None`, as
    /// keys made before keys named one: the vhost `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost: Option<String>,
}

impl AccessKeyRecord {
    /// The vhost the key acts in.
    pub fn vhost(&self) -> &str {
        self.vhost.as_deref().unwrap_or("/")
    }
}

/// A secret under AES-256-GCM: the nonce and the ciphertext with its tag, in base64.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedSecret {
    nonce: String,
    ciphertext: String,
}

/// The key secrets are sealed with: 32 random bytes, hex, in a file of its own.
pub struct SecretsKey(LessSafeKey);

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsKey(..)")
    }
}

impl SecretsKey {
    /// The key in `path`, made there (readable by its owner only) when the file does not exist.
    pub fn read_or_create(path: &Path) -> Result<SecretsKey, String> {
        let shown = path.display();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let bytes = hex_decode(text.trim()).filter(|b| b.len() == 32).ok_or_else(|| {
                    format!("{shown}: the secrets key file must hold 64 hex digits (32 bytes)")
                })?;
                Ok(SecretsKey::from_bytes(&bytes))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; 32];
                random(&mut bytes);
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                let mut file = options
                    .open(path)
                    .map_err(|e| format!("{shown}: cannot create the secrets key file: {e}"))?;
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                file.write_all(format!("{hex}\n").as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| format!("{shown}: cannot write the secrets key file: {e}"))?;
                Ok(SecretsKey::from_bytes(&bytes))
            }
            Err(e) => Err(format!("{shown}: cannot read the secrets key file: {e}")),
        }
    }

    fn from_bytes(bytes: &[u8]) -> SecretsKey {
        // 32 bytes is AES-256's key length.
        SecretsKey(LessSafeKey::new(UnboundKey::new(&AES_256_GCM, bytes).expect("a 32-byte key")))
    }

    fn aad(id: &str, user: &str) -> Vec<u8> {
        [SEAL_CONTEXT, id.as_bytes(), b"\0", user.as_bytes()].concat()
    }

    /// `secret` sealed for key `id` of `user`.
    pub fn seal(&self, id: &str, user: &str, secret: &str) -> SealedSecret {
        let mut nonce = [0u8; NONCE_LEN];
        random(&mut nonce);
        let mut data = secret.as_bytes().to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Self::aad(id, user)),
                &mut data,
            )
            .expect("sealing a short secret cannot fail");
        SealedSecret { nonce: STANDARD.encode(nonce), ciphertext: STANDARD.encode(data) }
    }

    /// The secret of `record`, if this key sealed it for that id and user.
    pub fn open(&self, record: &AccessKeyRecord) -> Option<String> {
        let nonce: [u8; NONCE_LEN] = STANDARD.decode(&record.sealed.nonce).ok()?.try_into().ok()?;
        let mut data = STANDARD.decode(&record.sealed.ciphertext).ok()?;
        let aad = Aad::from(Self::aad(&record.id, &record.user));
        let plain = self.0.open_in_place(Nonce::assume_unique_for_key(nonce), aad, &mut data).ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

fn random(out: &mut [u8]) {
    // The OS random source failing is not something a broker can go on without.
    SystemRandom::new().fill(out).expect("the operating system's random source failed");
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// A new key id and secret: `HGAK` and 16 characters of base32, and 40 characters of base64 (30
/// random bytes), as AWS's look.
pub fn new_id_and_secret() -> (String, String) {
    const BASE32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut bytes = [0u8; 16 + 30];
    random(&mut bytes);
    let id: String = bytes[..16].iter().map(|b| BASE32[usize::from(b & 31)] as char).collect();
    (format!("{ID_PREFIX}{id}"), STANDARD.encode(&bytes[16..]))
}

impl UserStore {
    /// Adds an access key of an existing user in an existing vhost, up to
    /// [`ACCESS_KEYS_PER_USER_MAX`] each.
    pub fn add_access_key(&self, record: AccessKeyRecord) -> Result<(), StoreError> {
        self.update(|state| {
            if !state.users.contains_key(&record.user) {
                return Err(StoreError::Unknown(format!("user {}", record.user)));
            }
            if !state.vhosts.contains_key(record.vhost()) {
                return Err(StoreError::Unknown(format!("vhost {}", record.vhost())));
            }
            let held = state.access_keys.values().filter(|k| k.user == record.user).count();
            if held >= ACCESS_KEYS_PER_USER_MAX {
                return Err(StoreError::TooManyAccessKeys { user: record.user.clone() });
            }
            state.access_keys.insert(record.id.clone(), record);
            Ok(())
        })
    }

    pub fn access_key(&self, id: &str) -> Option<AccessKeyRecord> {
        self.read().access_keys.get(id).cloned()
    }

    /// `user`'s keys, oldest first.
    pub fn access_keys_of(&self, user: &str) -> Vec<AccessKeyRecord> {
        let mut keys: Vec<AccessKeyRecord> =
            self.read().access_keys.values().filter(|k| k.user == user).cloned().collect();
        keys.sort_by_key(|k| k.created_ms);
        keys
    }

    /// Revokes `user`'s key `id`; `false` when the user has no such key.
    pub fn remove_access_key(&self, user: &str, id: &str) -> Result<bool, StoreError> {
        self.update(|state| {
            let owned = state.access_keys.get(id).is_some_and(|k| k.user == user);
            if owned {
                state.access_keys.remove(id);
            }
            Ok(owned)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VhostRecord;

    fn record(key: &SecretsKey, id: &str, user: &str, secret: &str) -> AccessKeyRecord {
        AccessKeyRecord {
            id: id.into(),
            user: user.into(),
            created_ms: 1,
            sealed: key.seal(id, user, secret),
            vhost: None,
        }
    }

    /// A sealed secret opens under its key for its id and user only, and does not show in the
    /// record's bytes.
    #[test]
    fn sealed_secrets_open_only_where_they_were_sealed() {
        let dir = std::env::temp_dir().join(format!("hg-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secrets.key");
        let _ = std::fs::remove_file(&path);
        let key = SecretsKey::read_or_create(&path).unwrap();
        let again = SecretsKey::read_or_create(&path).unwrap();
        let sealed = record(&key, "HGAK1", "ops", "s3cr3t-s3cr3t");
        assert_eq!(key.open(&sealed).as_deref(), Some("s3cr3t-s3cr3t"));
        assert_eq!(again.open(&sealed).as_deref(), Some("s3cr3t-s3cr3t"), "the file keeps the key");
        let bytes = serde_json::to_string(&sealed).unwrap();
        assert!(!bytes.contains("s3cr3t"), "{bytes}");
        assert_eq!(key.open(&AccessKeyRecord { user: "eve".into(), ..sealed.clone() }), None);
        assert_eq!(key.open(&AccessKeyRecord { id: "HGAK2".into(), ..sealed.clone() }), None);
        let other = SecretsKey::read_or_create(&dir.join("other.key")).unwrap();
        assert_eq!(other.open(&sealed), None, "another key");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        std::fs::write(&path, "not hex").unwrap();
        assert!(SecretsKey::read_or_create(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Keys are saved as catalog entries and read back from them; a user holds at most two;
    /// an unknown user gets none; deleting the user deletes its keys, in the catalog too.
    #[test]
    fn keys_are_catalog_records_that_go_with_their_user() {
        use std::collections::BTreeMap;
        use std::sync::{Arc, Mutex};

        use hourglass_broker::CatalogChange;

        let catalog: Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>> = Arc::default();
        let written = catalog.clone();
        let store = UserStore::with_defaults(vec![]).persist_with(Box::new(move |changes| {
            let mut catalog = written.lock().unwrap();
            for change in changes {
                match change {
                    CatalogChange::Put { key, value } => catalog.insert(key.to_vec(), value.to_vec()),
                    CatalogChange::Delete { key } => catalog.remove(&key.to_vec()),
                    CatalogChange::DeletePrefix { .. } => unreachable!("the user store deletes by key"),
                };
            }
            Ok(())
        }));
        store.put_user_with_password("ops", "pw", vec![]).unwrap();
        let key = SecretsKey::from_bytes(&[9; 32]);
        for id in ["HGAK1", "HGAK2"] {
            store.add_access_key(record(&key, id, "ops", "secret")).unwrap();
        }
        assert!(matches!(
            store.add_access_key(record(&key, "HGAK3", "ops", "s")),
            Err(StoreError::TooManyAccessKeys { .. })
        ));
        assert!(matches!(
            store.add_access_key(record(&key, "HGAK4", "nobody", "s")),
            Err(StoreError::Unknown(_))
        ));

        let reopened = {
            let catalog = catalog.lock().unwrap();
            let entries = catalog.iter().map(|(k, v)| (k.as_slice(), v.as_slice()));
            UserStore::from_catalog(entries, vec![]).unwrap().unwrap()
        };
        let found = reopened.access_key("HGAK2").unwrap();
        assert_eq!((found.user.as_str(), key.open(&found).as_deref()), ("ops", Some("secret")));
        assert_eq!(reopened.access_keys_of("ops").len(), 2);

        assert!(store.remove_access_key("ops", "HGAK1").unwrap());
        assert!(!store.remove_access_key("guest", "HGAK2").unwrap(), "not guest's key");
        store.delete_user("ops").unwrap();
        assert_eq!(store.access_key("HGAK2"), None);
        let catalog = catalog.lock().unwrap();
        let keys_left = catalog.keys().filter(|k| k.windows(4).any(|w| w == b"HGAK")).count();
        assert_eq!(keys_left, 0, "deleted in the catalog with the user");
    }

    /// A key acts in an existing vhost (`/` when it names none), and goes with its vhost.
    #[test]
    fn keys_name_an_existing_vhost_and_go_with_it() {
        let store = UserStore::with_defaults(vec![]);
        store.put_user_with_password("ops", "pw", vec![]).unwrap();
        let key = SecretsKey::from_bytes(&[9; 32]);
        let in_vhost = |id: &str, vhost: &str| AccessKeyRecord {
            vhost: Some(vhost.into()),
            ..record(&key, id, "ops", "s")
        };
        assert!(matches!(store.add_access_key(in_vhost("HGAK1", "billing")), Err(StoreError::Unknown(_))));
        let billing = VhostRecord { name: "billing".into(), ..store.vhost("/").unwrap() };
        store.put_vhost(billing).unwrap();
        store.add_access_key(in_vhost("HGAK1", "billing")).unwrap();
        store.add_access_key(record(&key, "HGAK2", "ops", "s")).unwrap();
        assert_eq!(store.access_key("HGAK1").unwrap().vhost(), "billing");
        assert_eq!(store.access_key("HGAK2").unwrap().vhost(), "/");
        store.delete_vhost("billing").unwrap();
        assert_eq!(store.access_key("HGAK1"), None);
        assert!(store.access_key("HGAK2").is_some());
    }

    #[test]
    fn new_ids_and_secrets_look_like_aws_keys() {
        let (id, secret) = new_id_and_secret();
        assert!(id.starts_with("HGAK") && id.len() == 20, "{id}");
        assert_eq!(secret.len(), 40);
        assert_ne!(new_id_and_secret().0, id);
    }
}
