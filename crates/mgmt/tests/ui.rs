//! The web UI's side of the HTTP listener (docs/ui.md): its files at `/` without login, and the
//! API's answers to the page's own requests (no Basic-auth challenge for a failed login).

mod common;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::response::Response;
use common::{request, state, GUEST};
use hourglass_mgmt::AppState;
use serde_json::json;
use tower::ServiceExt;

async fn send(state: &AppState, uri: &str, headers: &[(&str, &str)]) -> Response {
    let mut builder = Request::builder().method("GET").uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Body::empty()).unwrap();
    hourglass_mgmt::api_router(state.clone()).oneshot(request).await.unwrap()
}

async fn text(response: Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Issue #16: opening `/` gives the UI's page, without a login prompt, and its script and
/// stylesheet come from the same listener (nothing from elsewhere: the CSP allows only 'self').
#[tokio::test]
async fn the_ui_is_served_at_the_root_without_login() {
    let s = state();
    let page = send(&s, "/", &[]).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    let csp = page.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    let html = text(page).await;
    assert!(html.contains(r#"src="app.js""#) && html.contains(r#"href="app.css""#), "{html}");
    assert!(!html.contains("http://") && !html.contains("https://"), "the page loads nothing from elsewhere");
    for (path, content_type) in [("/app.js", "text/javascript"), ("/app.css", "text/css")] {
        let asset = send(&s, path, &[]).await;
        assert_eq!(asset.status(), StatusCode::OK, "{path}");
        assert!(asset.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with(content_type), "{path}");
        assert!(!text(asset).await.is_empty(), "{path}");
    }
}

/// The UI's login page must not be covered by the browser's Basic-auth dialog: a request from
/// the page's script (`X-Requested-With`) that fails to log in gets 401 without
/// `WWW-Authenticate`; any other client still gets the challenge, as from RabbitMQ.
#[tokio::test]
async fn a_failed_login_from_the_page_gets_no_basic_auth_challenge() {
    let s = state();
    let wrong = "Basic Z3Vlc3Q6d3Jvbmc="; // guest:wrong
    for auth in [None, Some(wrong)] {
        let mut headers = vec![("x-requested-with", "XMLHttpRequest")];
        headers.extend(auth.map(|a| ("authorization", a)));
        let from_page = send(&s, "/api/whoami", &headers).await;
        assert_eq!(from_page.status(), StatusCode::UNAUTHORIZED);
        assert!(!from_page.headers().contains_key(header::WWW_AUTHENTICATE), "{auth:?}");
        let other: Vec<_> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let from_client = send(&s, "/api/whoami", &other).await;
        assert_eq!(from_client.status(), StatusCode::UNAUTHORIZED);
        assert!(from_client.headers().contains_key(header::WWW_AUTHENTICATE), "{auth:?}");
    }
    let ok =
        send(&s, "/api/whoami", &[("x-requested-with", "XMLHttpRequest"), ("authorization", GUEST)]).await;
    assert_eq!(ok.status(), StatusCode::OK);
}

/// The overview's charts and totals: `queue_totals.messages_delayed` counts delayed messages,
/// and `message_stats` carries `expired` and `dead_lettered` (ours) over the existing queues.
#[tokio::test]
async fn overview_counts_delayed_expired_and_dead_lettered_messages() {
    let s = state();
    let queue = |args| json!({"arguments": args});
    let declare = |name: &'static str, args| {
        let s = s.clone();
        async move { request(&s, GUEST, "PUT", &format!("/api/queues/%2F/{name}"), Some(queue(args))).await.0 }
    };
    assert_eq!(declare("later", json!({"x-delivery-delay": 600_000})).await, StatusCode::CREATED);
    assert_eq!(declare("dead", json!({})).await, StatusCode::CREATED);
    let to_dead =
        json!({"x-message-ttl": 0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"});
    assert_eq!(declare("brief", to_dead).await, StatusCode::CREATED);
    assert_eq!(declare("gone", json!({"x-message-ttl": 0})).await, StatusCode::CREATED);
    for key in ["later", "later", "brief", "gone"] {
        let publish = json!({"routing_key": key, "payload": "x", "payload_encoding": "string"});
        let (status, _) =
            request(&s, GUEST, "POST", "/api/exchanges/%2F/amq.default/publish", Some(publish)).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, overview) = request(&s, GUEST, "GET", "/api/overview", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(overview["queue_totals"]["messages_delayed"], 2, "{overview}");
    assert_eq!(overview["queue_totals"]["messages_ready"], 1, "the dead-lettered copy waits in `dead`");
    assert_eq!(overview["message_stats"]["expired"], 2, "{overview}");
    assert_eq!(overview["message_stats"]["dead_lettered"], 1, "{overview}");
    assert!(overview["message_stats"]["expired_details"]["rate"].is_number());
}

/// Listings page, sort and filter by name on the server (the UI's lists ask for nothing else):
/// the queues page's sort keys `messages_delayed` and `messages_unacknowledged` order the rows.
#[tokio::test]
async fn queue_listing_sorts_by_delayed_count_and_filters_by_name() {
    let s = state();
    for (name, delayed) in [("a-1", 2), ("a-2", 0), ("b-1", 1)] {
        let args = json!({"arguments": {"x-delivery-delay": 600_000}});
        let (status, _) = request(&s, GUEST, "PUT", &format!("/api/queues/%2F/{name}"), Some(args)).await;
        assert_eq!(status, StatusCode::CREATED);
        for _ in 0..delayed {
            let publish = json!({"routing_key": name, "payload": "x", "payload_encoding": "string"});
            request(&s, GUEST, "POST", "/api/exchanges/%2F/amq.default/publish", Some(publish)).await;
        }
    }
    let uri = "/api/queues?page=1&page_size=2&sort=messages_delayed&sort_reverse=true";
    let (_, page) = request(&s, GUEST, "GET", uri, None).await;
    let names: Vec<&str> =
        page["items"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a-1", "b-1"]);
    assert_eq!((page["page_count"].clone(), page["total_count"].clone()), (json!(2), json!(3)));
    let (_, page) =
        request(&s, GUEST, "GET", "/api/queues?page=1&page_size=10&name=a-&sort=name", None).await;
    let names: Vec<&str> =
        page["items"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a-1", "a-2"]);
    assert_eq!(page["filtered_count"], 2);
}

/// The queue page's in-flight listing: a queue with nothing out under a visibility timeout lists
/// none (total 0); an unknown queue is 404, as for the delayed listing.
#[tokio::test]
async fn in_flight_listing_is_empty_without_deliveries_and_404_for_an_unknown_queue() {
    let s = state();
    let args = json!({"arguments": {"x-visibility-timeout": 60_000}});
    assert_eq!(request(&s, GUEST, "PUT", "/api/queues/%2F/jobs", Some(args)).await.0, StatusCode::CREATED);
    let (status, listed) = request(&s, GUEST, "GET", "/api/queues/%2F/jobs/in-flight", None).await;
    assert_eq!((status, listed), (StatusCode::OK, json!({"deliveries": [], "total": 0})));
    let (status, _) = request(&s, GUEST, "GET", "/api/queues/%2F/nope/in-flight", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// semantics §1, the queue page's timeline: a queue reports how many ready messages carry a TTL
/// deadline and the first and last of those deadlines — the per-message `expiration` and the
/// queue's `x-message-ttl` alike.
#[tokio::test]
async fn a_queue_reports_when_its_ready_messages_expire() {
    let s = state();
    let args = json!({"arguments": {"x-message-ttl": 60_000}});
    assert_eq!(request(&s, GUEST, "PUT", "/api/queues/%2F/brief", Some(args)).await.0, StatusCode::CREATED);
    let now_ms = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        u64::try_from(since.as_millis()).unwrap()
    };
    let before = now_ms();
    for properties in [json!({}), json!({"expiration": "5000"})] {
        let publish = json!({"routing_key": "brief", "payload": "x", "payload_encoding": "string", "properties": properties});
        let (status, _) =
            request(&s, GUEST, "POST", "/api/exchanges/%2F/amq.default/publish", Some(publish)).await;
        assert_eq!(status, StatusCode::OK);
    }
    let after = now_ms();
    let (_, queue) = request(&s, GUEST, "GET", "/api/queues/%2F/brief", None).await;
    assert_eq!(queue["messages_with_ttl"], 2, "{queue}");
    let first = queue["next_expiry_ms"].as_u64().unwrap();
    let last = queue["last_expiry_ms"].as_u64().unwrap();
    assert!((before + 5_000..=after + 5_000).contains(&first), "the 5 s expiration comes first: {queue}");
    assert!((before + 60_000..=after + 60_000).contains(&last), "the queue's 60 s TTL comes last: {queue}");
}
