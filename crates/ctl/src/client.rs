//! A small blocking client for the management API.

use anyhow::{bail, Context};
use base64::Engine;
use serde_json::Value;

pub struct Client {
    base: String,
    auth: String,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(url: &str, user: &str, password: &str) -> Self {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        Client { base: url.trim_end_matches('/').to_owned(), auth: format!("Basic {token}"), agent }
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self.agent.get(self.url(path)).header("Authorization", &self.auth).call();
        self.finish(path, response)
    }

    /// The same API as another user.
    pub fn with_credentials(&self, user: &str, password: &str) -> Client {
        Client::new(&self.base, user, password)
    }

    /// The management API's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Whether GET `path` finds the object (200) rather than 404.
    pub fn exists(&self, path: &str) -> anyhow::Result<bool> {
        let response = self.agent.get(self.url(path)).header("Authorization", &self.auth).call();
        let response = response.with_context(|| format!("requesting {}{path}", self.base))?;
        if response.status().as_u16() == 404 {
            return Ok(false);
        }
        self.finish(path, Ok(response)).map(|_| true)
    }

    pub fn put(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let response = self
            .agent
            .put(self.url(path))
            .header("Authorization", &self.auth)
            .content_type("application/json")
            .send(body.to_string());
        self.finish(path, response)
    }

    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let response = self
            .agent
            .post(self.url(path))
            .header("Authorization", &self.auth)
            .content_type("application/json")
            .send(body.to_string());
        self.finish(path, response)
    }

    pub fn delete(&self, path: &str) -> anyhow::Result<Value> {
        let response = self.agent.delete(self.url(path)).header("Authorization", &self.auth).call();
        self.finish(path, response)
    }

    /// DELETE with RabbitMQ's `X-Reason` header (the text a closed connection is given).
    pub fn delete_with_reason(&self, path: &str, reason: &str) -> anyhow::Result<Value> {
        let response = self
            .agent
            .delete(self.url(path))
            .header("Authorization", &self.auth)
            .header("X-Reason", reason)
            .call();
        self.finish(path, response)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn finish(
        &self,
        path: &str,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<Value> {
        let mut response = response.with_context(|| format!("requesting {}{path}", self.base))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status >= 400 {
            let reason = body.get("reason").and_then(Value::as_str).unwrap_or(&text);
            if status == 404 {
                return Err(NotFound(format!("{} not found ({status}: {reason})", describe(path))).into());
            }
            bail!("{status}: {reason}");
        }
        Ok(body)
    }
}

/// The API answered 404: what it did not find (a verb may answer it as rabbitmqctl does).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotFound(String);

/// What an API path names, for "not found" errors: `/api/queues/%2F/jobs` → `queue 'jobs' in
/// vhost '/'`.
pub fn describe(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<String> = path.trim_start_matches("/api/").split('/').map(decode).collect();
    let part = |i: usize| parts.get(i).map(String::as_str);
    let in_vhost = |kind: &str| match (part(1), part(2)) {
        (Some(vhost), Some(name)) => format!("{kind} '{name}' in vhost '{vhost}'"),
        (Some(vhost), None) => format!("vhost '{vhost}'"),
        _ => path.to_owned(),
    };
    match (part(0), part(3), part(4)) {
        (Some("queues"), Some("delayed"), Some(id)) => {
            format!("delayed message {id} of {}", in_vhost("queue"))
        }
        (Some("queues"), ..) => in_vhost("queue"),
        (Some("exchanges"), ..) => in_vhost("exchange"),
        (Some("policies"), ..) => in_vhost("policy"),
        (Some("operator-policies"), ..) => in_vhost("operator policy"),
        (Some("permissions"), ..) => in_vhost("permissions of user"),
        (Some("users"), ..) => format!("user '{}'", part(1).unwrap_or_default()),
        (Some("vhosts"), ..) => format!("vhost '{}'", part(1).unwrap_or_default()),
        (Some("connections"), ..) => format!("connection '{}'", part(1).unwrap_or_default()),
        _ => path.to_owned(),
    }
}

/// Percent-decoding of one path segment (what `segment` encodes).
fn decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A path segment, percent-encoded (vhost `/` becomes `%2F`).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 404 names what was looked for, with the vhost decoded.
    #[test]
    fn paths_are_described_for_not_found_errors() {
        assert_eq!(describe("/api/queues/%2F/jobs"), "queue 'jobs' in vhost '/'");
        assert_eq!(
            describe("/api/queues/dev/a%20b/delayed/7"),
            "delayed message 7 of queue 'a b' in vhost 'dev'"
        );
        assert_eq!(describe("/api/users/bob"), "user 'bob'");
        assert_eq!(describe("/api/exchanges/nope"), "vhost 'nope'");
        assert_eq!(decode(&segment("a/b c%")), "a/b c%");
    }
}
