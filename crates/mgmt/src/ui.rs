//! The management web UI (docs/ui.md): the files built from `crates/mgmt/ui/src` into
//! `crates/mgmt/ui/dist` (committed, so `cargo build` needs no Node), embedded in the binary and
//! served at `/` without auth — the page logs in itself and calls `/api` with Basic credentials.
//! Nothing is fetched from elsewhere, so it works offline; the Content-Security-Policy allows
//! only this origin.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &[u8] = include_bytes!("../ui/dist/index.html");
const APP_JS: &[u8] = include_bytes!("../ui/dist/app.js");
const APP_CSS: &[u8] = include_bytes!("../ui/dist/app.css");

/// Only this origin's scripts, styles and API; no framing (clickjacking), no plugins.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
     script-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// The UI's routes; everything else falls through to the API router.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }))
        .route("/index.html", get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }))
        .route("/app.js", get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }))
        .route("/app.css", get(|| async { asset(APP_CSS, "text/css; charset=utf-8") }))
        // Browsers ask for it unprompted; without this they would get the API's 401.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
}

fn asset(bytes: &'static [u8], content_type: &'static str) -> Response {
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The files change only with the binary; revalidating each load is cheap on loopback/LAN.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}
