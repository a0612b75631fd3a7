//! `amqp://user:pass@host:port/vhost` as RabbitMQ's URI spec reads it: percent-decoded user,
//! password and vhost (`%2f` = `/`); an absent path means vhost `/`. TLS (`amqps`) is not
//! supported: the load tool measures brokers on loopback.

use anyhow::{bail, Context};

/// RabbitMQ's AMQP port, the default when the URL names none.
const DEFAULT_PORT: u16 = 5672;

/// Where and as whom to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmqpUrl {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub vhost: String,
}

impl AmqpUrl {
    /// Parses an `amqp://` URL.
    pub fn parse(url: &str) -> anyhow::Result<AmqpUrl> {
        let Some(rest) = url.strip_prefix("amqp://") else {
            bail!("only amqp:// URLs are supported, got {url:?}");
        };
        let (authority, path) = match rest.split_once('/') {
            Some((authority, path)) => (authority, Some(path)),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(info) => match info.split_once(':') {
                Some((user, password)) => (percent_decode(user)?, percent_decode(password)?),
                None => (percent_decode(info)?, String::new()),
            },
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((host, port)) => (host, port.parse().with_context(|| format!("bad port in {url:?}"))?),
            None => (hostport, DEFAULT_PORT),
        };
        if host.is_empty() {
            bail!("no host in {url:?}");
        }
        let vhost = match path {
            None => "/".to_owned(),
            Some(path) => percent_decode(path)?,
        };
        Ok(AmqpUrl { host: host.to_owned(), port, user, password, vhost })
    }

    /// `host:port`, for connecting and for reports (never the password).
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Decodes `%XX` escapes.
fn percent_decode(text: &str) -> anyhow::Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).context("truncated %-escape")?;
            let hex = std::str::from_utf8(hex).context("bad %-escape")?;
            out.push(u8::from_str_radix(hex, 16).context("bad %-escape")?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).context("URL part is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default URL names the default vhost through `%2f`.
    #[test]
    fn default_url_parses_to_guest_on_vhost_slash() {
        let url = AmqpUrl::parse("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap();
        assert_eq!(url.host, "127.0.0.1");
        assert_eq!(url.port, 5672);
        assert_eq!(url.user, "guest");
        assert_eq!(url.password, "guest");
        assert_eq!(url.vhost, "/");
    }

    /// Without credentials, port or path the URL falls back to RabbitMQ's defaults.
    #[test]
    fn bare_host_uses_defaults() {
        let url = AmqpUrl::parse("amqp://localhost").unwrap();
        assert_eq!(url.address(), "localhost:5672");
        assert_eq!(url.vhost, "/");
        assert_eq!(url.user, "guest");
    }

    /// Other schemes are refused rather than misread.
    #[test]
    fn amqps_is_refused() {
        assert!(AmqpUrl::parse("amqps://h/").is_err());
    }
}
