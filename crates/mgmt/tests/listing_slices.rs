//! Full listings are built on the broker task in slices, with other work between them (issue
//! 22: one `GET /api/queues` over 100,000 queues built every row in one job, and a publisher's
//! confirm waited behind it for up to 345 ms).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hourglass_broker::admin::slices::SLICE_ROWS_MAX;
use hourglass_broker::requests::{AsUser, CallMethod, DeclareQueue};
use hourglass_broker::{Broker, BrokerConfig, Permissions, Timestamp};
use hourglass_mgmt::{AppState, BrokerHandle, JobRequest, JobRunner};
use hourglass_wire::{QueueBind, QueueDeclare, ShortStr};
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tower::ServiceExt;

use common::{request, GUEST};

/// Queues in the test: enough for several slices, and not a multiple of a slice.
const QUEUES: usize = 2 * SLICE_ROWS_MAX + 500;

/// An API over a broker task that counts the jobs it runs.
fn counting_state() -> (AppState, Arc<AtomicUsize>) {
    let (tx, mut rx) = mpsc::channel::<JobRequest>(64);
    let jobs = Arc::new(AtomicUsize::new(0));
    let counted = jobs.clone();
    let mut broker = Broker::new(BrokerConfig::default());
    tokio::spawn(async move {
        let mut runner = JobRunner::default();
        while let Some(job) = rx.recv().await {
            counted.fetch_add(1, Relaxed);
            runner.run(job, &mut broker, Timestamp::ZERO);
            while broker.poll_effect().is_some() {}
            runner.hand_over_notices(&mut broker);
        }
    });
    (AppState { broker: BrokerHandle::new(tx), ..common::state() }, jobs)
}

/// `QUEUES` queues in `/`, each also bound to amq.direct.
async fn declare_queues(state: &AppState) {
    for i in 0..QUEUES {
        let queue = ShortStr::try_from(format!("q{i:05}").as_str()).unwrap();
        let declare = QueueDeclare { queue: queue.clone(), ..Default::default() };
        let bind = QueueBind {
            queue: queue.clone(),
            exchange: ShortStr::from_static("amq.direct"),
            routing_key: queue,
            ..Default::default()
        };
        state.broker.request(DeclareQueue { who: guest(), declare }).await.unwrap().unwrap();
        state.broker.request(CallMethod { who: guest(), method: bind.into() }).await.unwrap().unwrap();
    }
}

fn guest() -> AsUser {
    AsUser { user: "guest".into(), vhost: "/".into(), permissions: Permissions::full() }
}

/// The jobs one GET took, and its answer.
async fn jobs_of_get(state: &AppState, jobs: &AtomicUsize, uri: &str) -> (usize, Value) {
    let before = jobs.load(Relaxed);
    let (status, body) = request(state, GUEST, "GET", uri, None).await;
    assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    (jobs.load(Relaxed) - before, body)
}

/// A full queue listing and a full binding listing take at least one broker job per
/// SLICE_ROWS_MAX rows (the rows of one job never exceed it: `slices.rs`), and still list every
/// row in the listing's order.
#[tokio::test]
async fn full_listings_are_built_in_slices_of_rows() {
    let (state, jobs) = counting_state();
    declare_queues(&state).await;

    let (queue_jobs, queues) = jobs_of_get(&state, &jobs, "/api/queues").await;
    let names: Vec<&str> = queues.as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    let expected: Vec<String> = (0..QUEUES).map(|i| format!("q{i:05}")).collect();
    assert_eq!(names, expected);
    assert!(queue_jobs > QUEUES / SLICE_ROWS_MAX, "{QUEUES} queue rows in {queue_jobs} jobs");

    let (binding_jobs, bindings) = jobs_of_get(&state, &jobs, "/api/bindings/%2F").await;
    let bindings = bindings.as_array().unwrap();
    assert_eq!(bindings.len(), 2 * QUEUES);
    assert_eq!(
        (bindings[0]["source"].as_str(), bindings[0]["destination"].as_str()),
        (Some(""), Some("q00000"))
    );
    let last = &bindings[2 * QUEUES - 1];
    assert_eq!(last["source"], "amq.direct");
    assert_eq!(last["destination"].as_str(), expected.last().map(String::as_str));
    assert!(binding_jobs > 2 * QUEUES / SLICE_ROWS_MAX, "{} binding rows in {binding_jobs} jobs", 2 * QUEUES);
}

/// A full listing asks for a slice's rows only when the slices before it are written: while
/// the client has read one chunk, at most two slices of rows have been built (before, every row
/// was built, and held, before the first byte went out: 2.2 KB per queue at 100,000 queues).
/// Read to the end, it lists every row in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_listing_builds_each_slice_only_as_the_ones_before_are_written() {
    let (state, jobs) = counting_state();
    declare_queues(&state).await;
    let names: Vec<String> = (0..QUEUES).map(|i| format!("q{i:05}")).collect();
    // The bindings' slices: the implicit ones (2.5 slices), then amq.direct's in ranges of a slice.
    let binding_slices = QUEUES.div_ceil(SLICE_ROWS_MAX) + QUEUES.div_ceil(SLICE_ROWS_MAX);
    for (uri, slices) in [("/api/queues", QUEUES.div_ceil(SLICE_ROWS_MAX)), ("/api/bindings", binding_slices)]
    {
        let before = jobs.load(Relaxed);
        let request = Request::builder().uri(uri).header("authorization", GUEST).body(Body::empty()).unwrap();
        let response = hourglass_mgmt::api_router(state.clone()).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let mut bytes = body.frame().await.unwrap().unwrap().into_data().unwrap().to_vec();
        let built = jobs.load(Relaxed) - before - 1;
        assert!(built <= 2, "{uri}: {built} of {slices} slices of rows built while one chunk was read");

        while let Some(frame) = body.frame().await {
            bytes.extend_from_slice(&frame.unwrap().into_data().unwrap());
        }
        let items: Value = serde_json::from_slice(&bytes).unwrap();
        let items = items.as_array().unwrap();
        let listed: Vec<&str> =
            items.iter().map(|q| q.get("name").unwrap_or(&q["destination"]).as_str().unwrap()).collect();
        let expected: Vec<&str> = match uri {
            "/api/queues" => names.iter().map(String::as_str).collect(),
            _ => names.iter().chain(&names).map(String::as_str).collect(),
        };
        assert_eq!(listed, expected, "{uri}");
        assert_eq!(jobs.load(Relaxed) - before, 1 + slices, "{uri}: the names, then each slice");
    }
}

/// The overview's and the vhosts' queue totals, Prometheus' metrics and the rates sampler's pass
/// read the queues in slices too, and still count every queue and binding.
#[tokio::test]
async fn queue_totals_are_read_in_slices() {
    let (state, jobs) = counting_state();
    declare_queues(&state).await;
    for uri in ["/api/overview", "/api/vhosts"] {
        let (uri_jobs, _) = jobs_of_get(&state, &jobs, uri).await;
        assert!(uri_jobs > QUEUES / SLICE_ROWS_MAX, "{uri}: {QUEUES} queues in {uri_jobs} jobs");
    }
    let before = jobs.load(Relaxed);
    let path = "/metrics/detailed?family=queue_coarse_metrics&family=exchange_bindings";
    let request = Request::builder().uri(path).body(Body::empty()).unwrap();
    let response = hourglass_mgmt::metrics_router(state.clone()).oneshot(request).await.unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), 64 << 20).await.unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(jobs.load(Relaxed) - before > QUEUES / SLICE_ROWS_MAX, "Prometheus in one job");
    for exchange in ["", "amq.direct"] {
        let line =
            format!("rabbitmq_cluster_exchange_bindings{{vhost=\"/\",exchange=\"{exchange}\"}} {QUEUES}\n");
        assert!(text.contains(&line), "{line}");
    }

    let before = jobs.load(Relaxed);
    let sampled = hourglass_mgmt::rates::sampler::Sampled::read(&state.broker).await.unwrap();
    assert!(jobs.load(Relaxed) - before > QUEUES / SLICE_ROWS_MAX);
    let queue_keys = sampled.observations().iter().filter(|o| o.key.starts_with("queue\0")).count();
    assert_eq!(queue_keys, 2 * QUEUES, "counters and depth of each queue");
}

/// A page of a listing still sees every queue (the page is cut from all the rows), and one
/// queue is shown without listing the others.
#[tokio::test]
async fn paged_and_single_queue_answers_over_slices() {
    let (state, jobs) = counting_state();
    declare_queues(&state).await;
    let (_, page) =
        jobs_of_get(&state, &jobs, "/api/queues?page=3&page_size=7&sort=name&sort_reverse=true").await;
    assert_eq!(page["total_count"], QUEUES);
    let first = format!("q{:05}", QUEUES - 1 - 14);
    assert_eq!(page["items"][0]["name"].as_str(), Some(first.as_str()));

    let (show_jobs, shown) = jobs_of_get(&state, &jobs, "/api/queues/%2F/q00042").await;
    assert_eq!(shown["name"], "q00042");
    assert_eq!(show_jobs, 1);
}

/// A listing sorted on a field (read from each row slice by slice, as names alone cannot order
/// it), filtered and paged, shows exactly what sorting the full listing shows: a stable sort of
/// the listing's own order, reversed on request, cut into the page.
#[tokio::test]
async fn listings_sorted_on_a_field_match_the_full_listing_sorted() {
    let (state, jobs) = counting_state();
    declare_queues(&state).await;
    for i in 0..40 {
        let queue = format!("q{:05}", i * 61);
        for _ in 0..i % 5 {
            let publish = serde_json::json!({
                "routing_key": queue, "payload": "x", "payload_encoding": "string", "properties": {}
            });
            let uri = "/api/exchanges/%2F/amq.default/publish";
            let (status, body) = request(&state, GUEST, "POST", uri, Some(publish)).await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    }
    let (_, full) = jobs_of_get(&state, &jobs, "/api/queues").await;
    let full = full.as_array().unwrap().clone();
    assert_eq!(full.iter().filter(|q| q["messages"] == 4).count(), 8, "queues with 4 messages");
    let cases = [
        ("messages", true, "", 2, 25),
        ("messages_ready", false, "q0", 1, 100),
        ("durable", true, "", 3, 500),
        ("message_stats.publish", true, "", 1, 50),
        ("arguments", false, "1", 2, 30),
    ];
    for (field, reverse, name, page, page_size) in cases {
        let mut expected: Vec<&Value> =
            full.iter().filter(|q| q["name"].as_str().unwrap().contains(name)).collect();
        expected.sort_by(|a, b| sort_order(field_of(a, field), field_of(b, field)));
        if reverse {
            expected.reverse();
        }
        let filtered = expected.len();
        let expected: Vec<&Value> =
            expected.into_iter().skip((page - 1) * page_size).take(page_size).collect();
        let uri = format!(
            "/api/queues?sort={field}&sort_reverse={reverse}&name={name}&page={page}&page_size={page_size}"
        );
        let (_, got) = jobs_of_get(&state, &jobs, &uri).await;
        let names = |items: Vec<&Value>| items.iter().map(|q| q["name"].clone()).collect::<Vec<_>>();
        assert_eq!(names(got["items"].as_array().unwrap().iter().collect()), names(expected), "{uri}");
        assert_eq!(got["filtered_count"], filtered, "{uri}");
        assert_eq!(got["total_count"], QUEUES, "{uri}");
    }
}

fn field_of<'a>(item: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(item, |v, key| v.get(key))
}

/// RabbitMQ's sort of listing items by a field: numbers, strings and booleans by value, a
/// missing field first, anything else equal.
fn sort_order(a: Option<&Value>, b: Option<&Value>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            x.as_f64().unwrap().partial_cmp(&y.as_f64().unwrap()).unwrap()
        }
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

/// A queue's bindings are looked up in one job that builds only its rows (before: every binding
/// of the vhost, 2 × QUEUES rows in slices, filtered afterwards); an exchange's, in slices of
/// its own. Both equal the full listing filtered.
#[tokio::test]
async fn one_queues_or_exchanges_bindings_are_built_without_the_others() {
    let (state, jobs) = counting_state();
    declare_queues(&state).await;
    let (_, full) = jobs_of_get(&state, &jobs, "/api/bindings/%2F").await;
    let full = full.as_array().unwrap().clone();

    let (queue_jobs, of_queue) = jobs_of_get(&state, &jobs, "/api/queues/%2F/q00042/bindings").await;
    let expected: Vec<&Value> =
        full.iter().filter(|b| b["destination_type"] == "queue" && b["destination"] == "q00042").collect();
    assert_eq!(of_queue.as_array().unwrap().iter().collect::<Vec<_>>(), expected);
    assert_eq!(expected.len(), 2, "the default exchange's and amq.direct's");
    assert_eq!(queue_jobs, 1);

    let (source_jobs, of_exchange) =
        jobs_of_get(&state, &jobs, "/api/exchanges/%2F/amq.direct/bindings/source").await;
    let expected: Vec<&Value> = full.iter().filter(|b| b["source"] == "amq.direct").collect();
    assert_eq!(of_exchange.as_array().unwrap().iter().collect::<Vec<_>>(), expected);
    assert_eq!(source_jobs, 1 + QUEUES.div_ceil(SLICE_ROWS_MAX), "its keys, then its slices");
    let (_, of_default) = jobs_of_get(&state, &jobs, "/api/exchanges/%2F/amq.default/bindings/source").await;
    assert_eq!(of_default.as_array().unwrap().len(), QUEUES);
    let (_, to_exchange) =
        jobs_of_get(&state, &jobs, "/api/exchanges/%2F/amq.direct/bindings/destination").await;
    assert_eq!(to_exchange, serde_json::json!([]));
    let (status, _) = request(&state, GUEST, "GET", "/api/queues/nope/q/bindings", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
