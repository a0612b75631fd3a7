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
            bail!("{status}: {reason}");
        }
        Ok(body)
    }
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
