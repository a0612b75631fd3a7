//! Cross-site request protection for `/api` (issue #22, finding 5): a page on another origin must
//! not change anything through a browser that holds a cached Basic login.
//!
//! A browser lets any page send a "simple" request to any origin without asking it first: a form
//! posting `text/plain`, `application/x-www-form-urlencoded` or `multipart/form-data`, or a
//! `fetch` in `no-cors` mode with those types or none. Such a request carries the browser's cached
//! Basic credentials. Anything else (`application/json`, custom headers) needs a CORS preflight,
//! which this API never grants. So a state-changing request (any method but GET, HEAD, OPTIONS)
//! must pass two checks, made here before the login (a refused request never costs a password
//! hash nor counts as a failed login):
//!
//! - **a JSON body** (`application/json`, parameters such as `charset` allowed) when it has a body
//!   at all: anything else is 415. A body of unknown length (chunked) counts as a body. RabbitMQ
//!   also takes `multipart/form-data` on `POST /api/definitions` (its old UI's file upload);
//!   we do not: our UI reads the file and posts JSON, and a multipart form is exactly what a
//!   foreign page can send (docs/security.md "Cross-site requests").
//! - **no foreign origin**: an `Origin` header, or without one a `Referer`, that names another
//!   origin (scheme, host, port) than the request's own (`Host`, and the listener's scheme) is
//!   403; so is `Origin: null` (sandboxed frames, `no-referrer` forms). `X-Forwarded-Host` and
//!   `X-Forwarded-Proto` from a reverse proxy name the own origin when present: no foreign page
//!   can set them without a preflight. Clients that send neither header (curl, rabbitmqadmin,
//!   hourglass-ctl, client libraries) are unaffected.
//!
//! Every API answer also carries `X-Content-Type-Options: nosniff`, so no browser takes a JSON
//! answer for a script or a page.

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Body as _;

use crate::error::ApiError;

/// The only media type a state-changing request's body may have.
const JSON_MEDIA_TYPE: &str = "application/json";

/// The scheme the API is served over; the HTTP listener adds it to each request (without it, as
/// in in-process tests, `http`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerScheme {
    Http,
    Https,
}

impl ListenerScheme {
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerScheme::Http => "http",
            ListenerScheme::Https => "https",
        }
    }
}

/// Why a request was refused before it reached its route.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CrossSiteRefusal {
    #[error("a {method} request's body must be application/json, not {content_type}")]
    NotJson { method: Method, content_type: String },
    #[error("a {method} request's body must be application/json (no Content-Type was given)")]
    NoContentType { method: Method },
    #[error("{header} {origin} is not this API's origin {own}: cross-site requests are refused")]
    ForeignOrigin { header: &'static str, origin: String, own: String },
    #[error("{header} {origin} names no origin: cross-site requests are refused")]
    OpaqueOrigin { header: &'static str, origin: String },
}

impl CrossSiteRefusal {
    pub fn status(&self) -> StatusCode {
        match self {
            CrossSiteRefusal::NotJson { .. } | CrossSiteRefusal::NoContentType { .. } => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            CrossSiteRefusal::ForeignOrigin { .. } | CrossSiteRefusal::OpaqueOrigin { .. } => {
                StatusCode::FORBIDDEN
            }
        }
    }

    /// The `error` field of the answer.
    pub fn error(&self) -> &'static str {
        match self {
            CrossSiteRefusal::NotJson { .. } | CrossSiteRefusal::NoContentType { .. } => {
                "unsupported_media_type"
            }
            CrossSiteRefusal::ForeignOrigin { .. } | CrossSiteRefusal::OpaqueOrigin { .. } => {
                "cross_site_request"
            }
        }
    }
}

/// The middleware: refuses what [`check`] refuses, and marks every answer `nosniff`.
pub(crate) async fn guard(request: Request, next: Next) -> Response {
    let mut response = match check(&request) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(method = %request.method(), path = %request.uri().path(), %refusal, "HTTP request refused");
            ApiError::from(refusal).into_response()
        }
    };
    response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// The two checks of a state-changing request (module docs); other methods pass.
fn check(request: &Request) -> Result<(), CrossSiteRefusal> {
    let method = request.method();
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let scheme = request.extensions().get::<ListenerScheme>().copied().unwrap_or(ListenerScheme::Http);
    check_origin(request.headers(), scheme)?;
    let empty = request.body().size_hint().exact() == Some(0);
    if !empty {
        check_json(method, request.headers())?;
    }
    Ok(())
}

fn check_json(method: &Method, headers: &HeaderMap) -> Result<(), CrossSiteRefusal> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(CrossSiteRefusal::NoContentType { method: method.clone() });
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let media_type = text.split(';').next().unwrap_or_default().trim();
    if media_type.eq_ignore_ascii_case(JSON_MEDIA_TYPE) {
        Ok(())
    } else {
        Err(CrossSiteRefusal::NotJson { method: method.clone(), content_type: text.into_owned() })
    }
}

/// `Origin`, else `Referer`, must name the request's own origin when present.
fn check_origin(headers: &HeaderMap, scheme: ListenerScheme) -> Result<(), CrossSiteRefusal> {
    let (name, value) = match (headers.get(header::ORIGIN), headers.get(header::REFERER)) {
        (Some(origin), _) => ("Origin", origin),
        (None, Some(referer)) => ("Referer", referer),
        (None, None) => return Ok(()),
    };
    let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
    let Some(claimed) = Origin::of_url(&text) else {
        return Err(CrossSiteRefusal::OpaqueOrigin { header: name, origin: text });
    };
    let own = own_origin(headers, scheme);
    if own.as_ref() == Some(&claimed) {
        return Ok(());
    }
    let own = own.map_or_else(|| "(no Host header)".to_owned(), |o| o.to_string());
    Err(CrossSiteRefusal::ForeignOrigin { header: name, origin: claimed.to_string(), own })
}

/// This request's origin: `X-Forwarded-Proto` or the listener's scheme, and `X-Forwarded-Host`
/// or `Host`.
fn own_origin(headers: &HeaderMap, scheme: ListenerScheme) -> Option<Origin> {
    let first = |name: &str| {
        let value = headers.get(name)?.to_str().ok()?;
        Some(value.split(',').next().unwrap_or_default().trim().to_owned())
    };
    let scheme = first("x-forwarded-proto").unwrap_or_else(|| scheme.as_str().to_owned());
    let host = first("x-forwarded-host").or_else(|| first(header::HOST.as_str()))?;
    Origin::of_url(&format!("{scheme}://{host}"))
}

/// A tuple origin: scheme, host, port (the scheme's default when left out), lower-cased.
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of an absolute `http`/`https` URL (`Origin` is one without a path); `None` for
    /// `null`, other schemes or anything that does not parse.
    fn of_url(url: &str) -> Option<Origin> {
        let (scheme, rest) = url.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        // Credentials in a Referer (`user@host`) are not part of the origin.
        let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
        let (host, port) = split_port(authority)?;
        if host.is_empty() {
            return None;
        }
        let port = match port {
            Some(port) => port.parse().ok()?,
            None => default_port,
        };
        Some(Origin { scheme, host: host.to_ascii_lowercase(), port })
    }
}

/// `host[:port]`, `[v6]` or `[v6]:port`.
fn split_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if let Some(v6) = authority.strip_prefix('[') {
        let (address, after) = v6.split_once(']')?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        return Some((address, port));
    }
    Some(match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.scheme, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    /// Default ports, case and IPv6 brackets do not make two origins differ.
    #[test]
    fn origins_compare_by_scheme_host_and_port() {
        assert_eq!(Origin::of_url("http://Broker"), Origin::of_url("http://broker:80"));
        assert_eq!(Origin::of_url("https://b/x?y"), Origin::of_url("https://b:443"));
        assert_ne!(Origin::of_url("http://b:15672"), Origin::of_url("https://b:15672"));
        assert_ne!(Origin::of_url("http://b:15672"), Origin::of_url("http://b:15673"));
        assert_eq!(
            Origin::of_url("http://[::1]:15672/api").map(|o| o.to_string()).as_deref(),
            Some("http://[::1]:15672")
        );
        assert_eq!(Origin::of_url("null"), None);
        assert_eq!(Origin::of_url("file:///x"), None);
    }

    /// A same-origin page passes; another port, `null` or a foreign Referer is refused.
    #[test]
    fn only_the_own_origin_passes() {
        let own = [("host", "127.0.0.1:15672")];
        let with = |extra: (&'static str, &str)| headers(&[own[0], extra]);
        assert_eq!(check_origin(&headers(&own), ListenerScheme::Http), Ok(()));
        assert_eq!(check_origin(&with(("origin", "http://127.0.0.1:15672")), ListenerScheme::Http), Ok(()));
        assert!(check_origin(&with(("origin", "http://127.0.0.1:8080")), ListenerScheme::Http).is_err());
        assert!(check_origin(&with(("origin", "http://127.0.0.1:15672")), ListenerScheme::Https).is_err());
        assert!(check_origin(&with(("origin", "null")), ListenerScheme::Http).is_err());
        assert!(check_origin(&with(("referer", "http://evil.example/page")), ListenerScheme::Http).is_err());
        assert_eq!(
            check_origin(&with(("referer", "http://127.0.0.1:15672/#/queues")), ListenerScheme::Http),
            Ok(())
        );
        let proxied = headers(&[
            ("host", "10.0.0.5:15672"),
            ("x-forwarded-host", "mq.example"),
            ("x-forwarded-proto", "https"),
            ("origin", "https://mq.example"),
        ]);
        assert_eq!(check_origin(&proxied, ListenerScheme::Http), Ok(()));
    }

    /// `application/json` with parameters passes; a form's types and no type are 415.
    #[test]
    fn only_json_bodies_pass() {
        let post = Method::POST;
        assert_eq!(check_json(&post, &headers(&[("content-type", "application/json")])), Ok(()));
        assert_eq!(
            check_json(&post, &headers(&[("content-type", "Application/JSON; charset=utf-8")])),
            Ok(())
        );
        for form in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            let refused = check_json(&post, &headers(&[("content-type", form)])).unwrap_err();
            assert_eq!(refused.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{form}");
        }
        assert!(check_json(&post, &HeaderMap::new()).is_err());
    }
}
