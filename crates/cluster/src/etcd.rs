//! A small, blocking etcd v3 client over etcd's JSON gateway (`POST /v3/...`), for the
//! coordination thread: leases, reads, puts and the two transactions the cluster needs.
//!
//! etcd encodes keys and values as base64 and 64-bit integers as JSON strings; fields equal to
//! their zero value are left out (so a missing `succeeded` means `false`). Every call tries the
//! endpoints in turn, starting with the one that answered last. `https://` endpoints are reached
//! over TLS: etcd's certificate is verified against the CA given ([`EtcdTls`]), and a client
//! certificate is presented when etcd asks for one (its `--client-cert-auth`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

/// One key as etcd holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    /// The revision that created the key: unique and increasing across the etcd cluster, so the
    /// leader key's create revision is the leader's term.
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

/// TLS to etcd: the CA its server certificate must chain to, and optionally this node's client
/// certificate chain and key (all PEM).
#[derive(Clone, Debug)]
pub struct EtcdTls {
    pub ca_pem: Vec<u8>,
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// TLS to etcd failed: bad settings, or a certificate one side refuses. Not retried at join.
    #[error("TLS to etcd failed: {0}")]
    Tls(String),
    #[error("no etcd endpoint answered ({0})")]
    Unreachable(String),
    #[error("etcd refused {path}: HTTP {status}: {body}")]
    Refused { path: &'static str, status: u16, body: String },
    #[error("etcd answered {path} with something unreadable: {reason}")]
    Unreadable { path: &'static str, reason: String },
}

impl EtcdError {
    /// Whether trying again later may succeed (etcd away, restarting, or without a leader), as
    /// opposed to a setting that must be fixed.
    pub fn is_transient(&self) -> bool {
        !matches!(self, EtcdError::Tls(_))
    }
}

/// A client for one etcd cluster (any of its endpoints).
#[derive(Debug)]
pub struct Etcd {
    agent: ureq::Agent,
    endpoints: Vec<String>,
    preferred: AtomicUsize,
    timeout: Duration,
    /// No request runs past this instant ([`Etcd::give_up_at`]).
    deadline: Mutex<Option<Instant>>,
}

impl Etcd {
    /// `endpoints` are base URLs (`http://127.0.0.1:2379`, `https://…` with `tls`); each request
    /// gives up after `timeout`.
    pub fn new(endpoints: Vec<String>, timeout: Duration, tls: Option<&EtcdTls>) -> Result<Etcd, EtcdError> {
        let mut config =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout));
        if let Some(tls) = tls {
            config = config.tls_config(tls_config(tls)?);
        }
        let agent = config.build().into();
        let endpoints = endpoints.into_iter().map(|e| e.trim_end_matches('/').to_owned()).collect();
        Ok(Etcd { agent, endpoints, preferred: AtomicUsize::new(0), timeout, deadline: Mutex::new(None) })
    }

    /// From now on no request runs past `at` (`None`: only the per-request timeout). A leader
    /// sets it to the end of its lease window: past it, waiting on a silent etcd would only
    /// delay its step-down (issue #21: 6.3 s instead of 3 s behind a dropping network).
    pub fn give_up_at(&self, at: Option<Instant>) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    /// How long the next request may take: the timeout, cut to the deadline.
    fn request_timeout(&self) -> Option<Duration> {
        match *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Some(self.timeout),
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                (!left.is_zero()).then(|| left.min(self.timeout))
            }
        }
    }

    fn call(&self, path: &'static str, body: Value) -> Result<Value, EtcdError> {
        let count = self.endpoints.len().max(1);
        let start = self.preferred.load(Ordering::Relaxed);
        let mut last_error = EtcdError::Unreachable(String::from("no endpoints configured"));
        for attempt in 0..self.endpoints.len() {
            let index = (start + attempt) % count;
            let url = format!("{}{}", self.endpoints[index], path);
            let Some(timeout) = self.request_timeout() else {
                return Err(EtcdError::Unreachable(format!("{path}: past the lease window")));
            };
            let response = self
                .agent
                .post(&url)
                .header("content-type", "application/json")
                .config()
                .timeout_global(Some(timeout))
                .build()
                .send(body.to_string());
            let mut response = match response {
                Ok(response) => response,
                Err(error) => {
                    last_error = match is_tls_failure(&error) {
                        true => EtcdError::Tls(format!("{url}: {error}")),
                        false => EtcdError::Unreachable(format!("{url}: {error}")),
                    };
                    continue;
                }
            };
            self.preferred.store(index, Ordering::Relaxed);
            let status = response.status().as_u16();
            let text = response.body_mut().read_to_string().unwrap_or_default();
            if status != 200 {
                return Err(EtcdError::Refused { path, status, body: text });
            }
            return serde_json::from_str(&text)
                .map_err(|e| EtcdError::Unreadable { path, reason: e.to_string() });
        }
        Err(last_error)
    }

    /// A new lease of `ttl_secs`; its id.
    pub fn grant_lease(&self, ttl_secs: u64) -> Result<i64, EtcdError> {
        let answer = self.call("/v3/lease/grant", json!({ "TTL": ttl_secs }))?;
        let id = int(&answer["ID"]);
        if id == 0 {
            return Err(EtcdError::Unreadable { path: "/v3/lease/grant", reason: "no lease id".into() });
        }
        Ok(id)
    }

    /// Renews `lease`; the seconds it has left, 0 when it has already expired.
    pub fn keep_alive(&self, lease: i64) -> Result<i64, EtcdError> {
        let answer = self.call("/v3/lease/keepalive", json!({ "ID": lease.to_string() }))?;
        Ok(int(&answer["result"]["TTL"]))
    }

    /// Ends `lease` now: every key attached to it goes.
    pub fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        self.call("/v3/lease/revoke", json!({ "ID": lease.to_string() })).map(drop)
    }

    pub fn get(&self, key: &str) -> Result<Option<KeyValue>, EtcdError> {
        let answer = self.call("/v3/kv/range", Range::Key(key.to_owned()).request())?;
        Ok(kvs(&answer, "/v3/kv/range")?.into_iter().next())
    }

    /// Every key that starts with `prefix`, in key order.
    pub fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, EtcdError> {
        kvs(&self.call("/v3/kv/range", Range::Prefix(prefix.to_owned()).request())?, "/v3/kv/range")
    }

    /// Several reads in one transaction: one round trip, all at the same revision. One list of
    /// key-values per range, in the order asked.
    pub fn read_many(&self, ranges: &[Range]) -> Result<Vec<Vec<KeyValue>>, EtcdError> {
        let reads: Vec<Value> =
            ranges.iter().map(|range| json!({ "request_range": range.request() })).collect();
        let answer = self.call("/v3/kv/txn", json!({ "compare": [], "success": reads }))?;
        let responses = answer["responses"].as_array().cloned().unwrap_or_default();
        if responses.len() != ranges.len() {
            return Err(EtcdError::Unreadable {
                path: "/v3/kv/txn",
                reason: format!("{} answers to {} reads", responses.len(), ranges.len()),
            });
        }
        responses.iter().map(|response| kvs(&response["response_range"], "/v3/kv/txn")).collect()
    }

    /// Sets `key` (attached to `lease` unless it is 0).
    pub fn put(&self, key: &str, value: &[u8], lease: i64) -> Result<(), EtcdError> {
        self.call("/v3/kv/put", put_request(key, value, lease)).map(drop)
    }

    /// Creates `key` only if it does not exist and `other` is still at modification revision
    /// `other_revision` (0: `other` does not exist); the new key's create revision, or `None`.
    pub fn create_if_absent_and_unchanged(
        &self,
        key: &str,
        value: &[u8],
        lease: i64,
        other: &str,
        other_revision: i64,
    ) -> Result<Option<i64>, EtcdError> {
        let other_compare = if other_revision == 0 {
            json!({ "key": B64.encode(other), "target": "CREATE", "result": "EQUAL", "create_revision": "0" })
        } else {
            json!({ "key": B64.encode(other), "target": "MOD", "result": "EQUAL", "mod_revision": other_revision.to_string() })
        };
        let body = json!({
            "compare": [
                { "key": B64.encode(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0" },
                other_compare,
            ],
            "success": [{ "request_put": put_request(key, value, lease) }],
        });
        let answer = self.call("/v3/kv/txn", body)?;
        if answer["succeeded"].as_bool() != Some(true) {
            return Ok(None);
        }
        Ok(Some(int(&answer["header"]["revision"])))
    }

    /// Sets `key` only while `guard` still has create revision `revision` (a leader writing while
    /// its term lasts); whether it was set.
    pub fn put_if_created_at(
        &self,
        guard: &str,
        revision: i64,
        key: &str,
        value: &[u8],
    ) -> Result<bool, EtcdError> {
        let body = json!({
            "compare": [{
                "key": B64.encode(guard), "target": "CREATE", "result": "EQUAL",
                "create_revision": revision.to_string(),
            }],
            "success": [{ "request_put": put_request(key, value, 0) }],
        });
        Ok(self.call("/v3/kv/txn", body)?["succeeded"].as_bool() == Some(true))
    }

    /// Deletes `key` only while it still has create revision `revision` (a leader giving up its
    /// own term, not a successor's); whether it was deleted.
    pub fn delete_if_created_at(&self, key: &str, revision: i64) -> Result<bool, EtcdError> {
        let body = json!({
            "compare": [{
                "key": B64.encode(key), "target": "CREATE", "result": "EQUAL",
                "create_revision": revision.to_string(),
            }],
            "success": [{ "request_delete_range": { "key": B64.encode(key) } }],
        });
        Ok(self.call("/v3/kv/txn", body)?["succeeded"].as_bool() == Some(true))
    }
}

/// Whether a failed request failed in TLS (a certificate etcd or this node refuses): a setting
/// to fix, not an etcd that is away — a starting node stops on it instead of waiting.
fn is_tls_failure(error: &ureq::Error) -> bool {
    match error {
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) | ureq::Error::TlsRequired => true,
        ureq::Error::Io(io) => io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()),
        _ => false,
    }
}

/// ureq's TLS settings for `tls`, on the workspace's rustls with its ring provider.
fn tls_config(tls: &EtcdTls) -> Result<ureq::tls::TlsConfig, EtcdError> {
    use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig, TlsProvider};
    let certificates = |pem: &[u8], what: &str| -> Result<Vec<Certificate<'static>>, EtcdError> {
        let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(pem)
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(cert)) => Some(cert),
                _ => None,
            })
            .collect();
        match certs.is_empty() {
            true => Err(EtcdError::Tls(format!("no certificate in the {what}"))),
            false => Ok(certs),
        }
    };
    let roots = certificates(&tls.ca_pem, "etcd CA file")?;
    let mut builder = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::new_with_certs(&roots))
        .unversioned_rustls_crypto_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()));
    if let Some((chain, key)) = &tls.client {
        let chain = certificates(chain, "etcd client certificate file")?;
        let key = PrivateKey::from_pem(key)
            .map_err(|e| EtcdError::Tls(format!("the etcd client key does not read: {e}")))?;
        builder = builder.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(builder.build())
}

/// What one read of [`Etcd::read_many`] covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Range {
    Key(String),
    /// Every key starting with this.
    Prefix(String),
}

impl Range {
    fn request(&self) -> Value {
        match self {
            Range::Key(key) => json!({ "key": B64.encode(key) }),
            Range::Prefix(prefix) => {
                json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) })
            }
        }
    }
}

fn put_request(key: &str, value: &[u8], lease: i64) -> Value {
    let mut put = json!({ "key": B64.encode(key), "value": B64.encode(value) });
    if lease != 0 {
        put["lease"] = Value::String(lease.to_string());
    }
    put
}

/// The smallest key after every key starting with `prefix` (etcd's `range_end` for a prefix).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// etcd's 64-bit integers arrive as strings (or are missing when zero).
fn int(value: &Value) -> i64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn kvs(answer: &Value, path: &'static str) -> Result<Vec<KeyValue>, EtcdError> {
    let Some(items) = answer["kvs"].as_array() else { return Ok(Vec::new()) };
    items
        .iter()
        .map(|item| {
            let decode = |field: &str| -> Result<Vec<u8>, EtcdError> {
                match item[field].as_str() {
                    None => Ok(Vec::new()),
                    Some(text) => {
                        B64.decode(text).map_err(|e| EtcdError::Unreadable { path, reason: e.to_string() })
                    }
                }
            };
            Ok(KeyValue {
                key: String::from_utf8_lossy(&decode("key")?).into_owned(),
                value: decode("value")?,
                create_revision: int(&item["create_revision"]),
                mod_revision: int(&item["mod_revision"]),
                lease: int(&item["lease"]),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_request_runs_past_the_deadline() {
        let etcd = Etcd::new(vec!["http://127.0.0.1:9".into()], Duration::from_secs(30), None).unwrap();
        assert_eq!(etcd.request_timeout(), Some(Duration::from_secs(30)));
        etcd.give_up_at(Some(Instant::now() + Duration::from_millis(200)));
        assert!(etcd.request_timeout().unwrap() <= Duration::from_millis(200));
        etcd.give_up_at(Some(Instant::now()));
        let started = Instant::now();
        let error = etcd.get("/k").unwrap_err();
        assert!(error.to_string().contains("past the lease window"), "{error}");
        assert!(started.elapsed() < Duration::from_millis(100));
        etcd.give_up_at(None);
        assert_eq!(etcd.request_timeout(), Some(Duration::from_secs(30)));
    }

    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix() {
        assert_eq!(prefix_end("a/"), b"a0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }

    #[test]
    fn integers_arrive_as_strings_or_not_at_all() {
        assert_eq!(int(&json!("42")), 42);
        assert_eq!(int(&json!(7)), 7);
        assert_eq!(int(&Value::Null), 0);
    }

    #[test]
    fn range_answers_decode_keys_values_and_revisions() {
        let answer = json!({"kvs": [{"key": "Zm9v", "value": "YmFy", "create_revision": "5", "mod_revision": "6", "lease": "9"}]});
        let kv = &kvs(&answer, "/v3/kv/range").unwrap()[0];
        assert_eq!((kv.key.as_str(), kv.value.as_slice()), ("foo", b"bar".as_slice()));
        assert_eq!((kv.create_revision, kv.mod_revision, kv.lease), (5, 6, 9));
        assert!(kvs(&json!({"count": "0"}), "/v3/kv/range").unwrap().is_empty());
    }
}
