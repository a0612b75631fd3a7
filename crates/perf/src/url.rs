//! `amqp://user:pass@host:port/vhost` as RabbitMQ's URI spec reads it: percent-decoded user,
//! password and vhost (`%2f` = `/`); an absent path means vhost `/`. `amqps://` connects over
//! TLS (default port 5671) and needs the query parameter `cacertfile` (RabbitMQ's URI query
//! parameter of that name): the CA the broker's certificate must chain to, as the load tool has
//! no system trust store. The host is the name checked against the certificate.

use anyhow::{bail, Context};

/// RabbitMQ's AMQP port, the default when the URL names none.
const DEFAULT_PORT: u16 = 5672;
/// RabbitMQ's AMQPS port, the default for `amqps://`.
const DEFAULT_TLS_PORT: u16 = 5671;

/// Where and as whom to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmqpUrl {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub vhost: String,
    /// `amqps://`: the CA file (PEM) the broker's certificate must chain to.
    pub tls_ca: Option<std::path::PathBuf>,
}

impl AmqpUrl {
    /// Parses an `amqp://` or `amqps://` URL.
    pub fn parse(url: &str) -> anyhow::Result<AmqpUrl> {
        let (rest, tls) = match (url.strip_prefix("amqp://"), url.strip_prefix("amqps://")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => bail!("only amqp:// and amqps:// URLs are supported, got {url:?}"),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let tls_ca =
            match query.into_iter().flat_map(|q| q.split('&')).find_map(|p| p.strip_prefix("cacertfile=")) {
                Some(path) => Some(std::path::PathBuf::from(percent_decode(path)?)),
                None => None,
            };
        if tls && tls_ca.is_none() {
            bail!("amqps:// needs ?cacertfile=CA.pem (the CA the broker's certificate chains to)");
        }
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
            None => (hostport, if tls { DEFAULT_TLS_PORT } else { DEFAULT_PORT }),
        };
        if host.is_empty() {
            bail!("no host in {url:?}");
        }
        let vhost = match path {
            None => "/".to_owned(),
            Some(path) => percent_decode(path)?,
        };
        Ok(AmqpUrl { host: host.to_owned(), port, user, password, vhost, tls_ca: tls_ca.filter(|_| tls) })
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

    /// amqps:// takes its CA from `cacertfile` (required) and defaults to port 5671; other
    /// schemes are refused rather than misread.
    #[test]
    fn amqps_needs_a_ca_and_defaults_to_5671() {
        assert!(AmqpUrl::parse("amqps://h/").is_err());
        let url = AmqpUrl::parse("amqps://u:p@localhost/%2f?cacertfile=%2Ftmp%2Fca.pem").unwrap();
        assert_eq!((url.port, url.vhost.as_str()), (5671, "/"));
        assert_eq!(url.tls_ca, Some("/tmp/ca.pem".into()));
        assert_eq!(AmqpUrl::parse("amqp://h/").unwrap().tls_ca, None);
        assert!(AmqpUrl::parse("http://h/").is_err());
    }
}
