//! Amazon SQS's API on Hourglass's own queues (issue 26): a boto3 or AWS SDK program sends,
//! receives and deletes messages of the same queues AMQP clients use, with one set of
//! visibility, delay and dead-letter rules (docs/sqs.md).
//!
//! - `sigv4.rs`: the signature of every request; `credentials.rs`: whose key it is.
//! - `request.rs`: a request's parameters, checked; `error.rs`: SQS's errors; `query.rs`: the
//!   Query protocol's requests read as JSON ones, and its XML answers.
//! - `queues.rs`: queue operations and queue URLs; `messages.rs`: message operations;
//!   `fifo.rs`: FIFO queues (groups received in order, deduplication, sequence numbers);
//!   `attributes.rs`: message attributes ↔ AMQP headers and the MD5s SDKs check;
//!   `system_attributes.rs`: a sender's `AWSTraceHeader`; `moves.rs`:
//!   message-move tasks (redrive from a dead-letter queue).
//! - The broker side is `hourglass_broker::admin` (`sqs_gateway.rs`): what SQS received and has
//!   not deleted.
//!
//! Served: AWS JSON 1.0 (`X-Amz-Target: AmazonSQS.<Op>`, what current SDKs speak), with the
//! `x-amzn-query-error` header for SDKs that read the Query protocol's codes, and the older Query
//! protocol (`query.rs`: form-encoded `Action=…`, XML answers) that it is turned into.

mod attributes;
mod credentials;
mod error;
mod fifo;
pub mod long_polls;
mod messages;
mod moves;
mod permissions;
mod policy;
mod query;
mod queues;
mod request;
pub mod sigv4;
mod system_attributes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use hourglass_broker::Timestamp;
use hourglass_mgmt::{BrokerHandle, UserStore};
use hourglass_session::{Admission, LoginLimiter};
use serde_json::Value;

pub use error::SqsError;
pub use long_polls::LongPolls;
pub use moves::{resume as resume_move_tasks, MoveTasks};
pub use policy::PolicyCache;

/// The largest request body read: SQS's 1 MiB message (or batch), with room for its escaping in
/// JSON (a line feed or a quote doubles) and its attributes. Larger bodies are refused before
/// they are parsed.
pub const REQUEST_BYTES_MAX: usize = 3 * 1024 * 1024;
/// The JSON protocol's content type.
const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// What the endpoint works with.
#[derive(Clone)]
pub struct SqsState {
    pub broker: BrokerHandle,
    pub users: Arc<UserStore>,
    /// Failed signatures are slowed like failed logins, per source address, shared with AMQP and
    /// the HTTP API.
    pub logins: Arc<LoginLimiter>,
    /// What access keys' secrets are sealed with; `None`: only the guest key works.
    pub secrets: Option<Arc<hourglass_identity::SecretsKey>>,
    /// The running and recent message-move tasks (`moves.rs`).
    pub moves: Arc<MoveTasks>,
    /// Wall-clock Unix milliseconds (a signature's time is checked against it).
    pub clock: fn() -> u64,
    /// The node's memory and disk alarms: while one is in effect sends are refused, as AMQP
    /// publishers are blocked.
    pub resources: hourglass_mgmt::resources::ResourceWatch,
    /// The long polls waiting now, per key and per address (`long_polls.rs`).
    pub long_polls: Arc<LongPolls>,
    /// Each queue's access policy as last read (`policy.rs`: its `Deny` statements apply).
    pub policies: Arc<PolicyCache>,
    /// Becomes `true` when the server shuts down: running move tasks stop stepping (they are
    /// taken up again at the next start) and let go of the broker.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

/// The endpoint's routes: every path takes a signed JSON request (SDKs post to the endpoint's
/// root or to a queue's URL).
pub fn router(state: SqsState) -> Router {
    Router::new().route("/", any(handle)).route("/{*path}", any(handle)).with_state(state)
}

/// The wall clock as Unix milliseconds.
pub fn system_clock() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Who made a request, and where it was addressed.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub user: String,
    /// The access key that signed the request.
    pub access_key: String,
    /// The address the request came from (none in tests without a socket).
    pub address: Option<std::net::IpAddr>,
    /// The vhost the caller's queues are in.
    pub vhost: String,
    /// `scheme://host[:port]` the request came to: queue URLs are built on it.
    pub base_url: String,
    /// The region the request was signed for (what an ARN names).
    pub region: String,
}

/// The wire protocol a request speaks: AWS JSON 1.0 (it names its operation in `X-Amz-Target`)
/// or the older Query protocol (`query.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Json,
    Query,
}

async fn handle(State(state): State<SqsState>, request: Request) -> Response {
    let protocol =
        if request.headers().contains_key("x-amz-target") { Protocol::Json } else { Protocol::Query };
    let request_id = messages::random_uuid();
    let mut response = match (protocol, handled(&state, protocol, request).await) {
        (Protocol::Json, Ok((_, answer))) => json_response(axum::http::StatusCode::OK, &answer, None),
        (Protocol::Json, Err(error)) => error_response(&error),
        (Protocol::Query, Ok((action, answer))) => {
            xml_response(axum::http::StatusCode::OK, query::answer_xml(&action, &answer, &request_id))
        }
        (Protocol::Query, Err(error)) => xml_response(error.status(), query::error_xml(&error, &request_id)),
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-amzn-requestid", value);
    }
    response
}

/// A request's action and its answer.
async fn handled(
    state: &SqsState,
    protocol: Protocol,
    request: Request,
) -> Result<(String, Value), SqsError> {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| *addr);
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, REQUEST_BYTES_MAX).await.map_err(|_| {
        SqsError::InvalidParameterValue(format!("Requests are limited to {REQUEST_BYTES_MAX} bytes."))
    })?;
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
        .collect();
    let signed = sigv4::Request {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        headers: &headers,
        body: &body,
    };
    let Signer { user, access_key, vhost, region } = authenticate(state, &signed, peer).await?;
    let host = parts.headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    // Queue URLs name the scheme the request came over (the listener marks HTTPS).
    let scheme = parts.extensions.get::<hourglass_mgmt::ListenerScheme>().map_or("http", |s| s.as_str());
    let address = peer.map(|p| p.ip().to_canonical());
    let caller = Caller { user, access_key, address, vhost, base_url: format!("{scheme}://{host}"), region };
    let (action, input) = match protocol {
        Protocol::Json => {
            let target = parts.headers.get("x-amz-target").and_then(|t| t.to_str().ok());
            let action = target.and_then(|t| t.strip_prefix("AmazonSQS.")).ok_or(SqsError::InvalidAction)?;
            let input: Value = if body.is_empty() {
                Value::Object(Default::default())
            } else {
                serde_json::from_slice(&body).map_err(|e| SqsError::SerializationException(e.to_string()))?
            };
            (action.to_owned(), input)
        }
        Protocol::Query => {
            let form = std::str::from_utf8(&body)
                .map_err(|_| SqsError::MalformedQueryString("the body is not UTF-8".into()))?;
            // A request sent to a queue's URL names that queue.
            let path = parts.uri.path();
            let queue_url = (path != "/").then(|| format!("{}{path}", caller.base_url));
            let read = query::to_input(&[parts.uri.query().unwrap_or(""), form], queue_url)?;
            (read.action, read.input)
        }
    };
    let input = request::Input::new(&input)?;
    let answer = perform(state, &caller, &action, &input).await?;
    Ok((action, answer))
}

/// Performs one operation, whichever protocol asked for it.
async fn perform(
    state: &SqsState,
    caller: &Caller,
    action: &str,
    input: &request::Input<'_>,
) -> Result<Value, SqsError> {
    if let Some(queue) = policy_target(caller, action, input) {
        policy::check(state, caller, action, &queue).await?;
    }
    match action {
        "CreateQueue" => queues::create(state, caller, input).await,
        "GetQueueUrl" => queues::get_url(state, caller, input).await,
        "ListQueues" => queues::list(state, caller, input).await,
        "DeleteQueue" => queues::delete(state, caller, input).await,
        "PurgeQueue" => queues::purge(state, caller, input).await,
        "GetQueueAttributes" => queues::attributes(state, caller, input).await,
        "ListDeadLetterSourceQueues" => queues::dead_letter_sources(state, caller, input).await,
        "SetQueueAttributes" => queues::set_attributes(state, caller, input).await,
        "TagQueue" => queues::tag(state, caller, input, false).await,
        "UntagQueue" => queues::tag(state, caller, input, true).await,
        "ListQueueTags" => queues::list_tags(state, caller, input).await,
        "StartMessageMoveTask" => moves::start(state, caller, input).await,
        "ListMessageMoveTasks" => moves::list(state, caller, input).await,
        "CancelMessageMoveTask" => moves::cancel(state, caller, input).await,
        "AddPermission" => permissions::add(state, caller, input).await,
        "RemovePermission" => permissions::remove(state, caller, input).await,
        "SendMessage" => messages::send(state, caller, input).await,
        "SendMessageBatch" => messages::send_batch(state, caller, input).await,
        "ReceiveMessage" => messages::receive(state, caller, input).await,
        "DeleteMessage" => messages::delete(state, caller, input).await,
        "DeleteMessageBatch" => messages::delete_batch(state, caller, input).await,
        "ChangeMessageVisibility" => messages::change_visibility(state, caller, input).await,
        "ChangeMessageVisibilityBatch" => messages::change_visibility_batch(state, caller, input).await,
        _ => Err(SqsError::InvalidAction),
    }
}

/// The queue whose policy an operation is checked against: the one its `QueueUrl`, `QueueName`
/// (GetQueueUrl) or `SourceArn` (move tasks) names. `None` for the operations on no queue, and
/// where the name does not read (the operation answers that).
fn policy_target(caller: &Caller, action: &str, input: &request::Input<'_>) -> Option<queues::QueueRef> {
    match action {
        // What changes the policy is never denied by it: whoever may configure the queue can
        // always change a policy that shuts everyone out (AWS keeps this for the account's root).
        "CreateQueue"
        | "ListQueues"
        | "CancelMessageMoveTask"
        | "SetQueueAttributes"
        | "AddPermission"
        | "RemovePermission" => None,
        "GetQueueUrl" => {
            let name = input.string("QueueName").ok()??;
            Some(queues::QueueRef { vhost: caller.vhost.clone(), name: name.to_owned() })
        }
        "StartMessageMoveTask" | "ListMessageMoveTasks" => {
            queues::queue_of_arn(input.string("SourceArn").ok()??).ok()
        }
        _ => queues::queue_named(caller, input).ok(),
    }
}

/// Who signed a request: the key's user, the key, the vhost it acts in, and the region the
/// request was signed for.
struct Signer {
    user: String,
    access_key: String,
    vhost: String,
    region: String,
}

/// Who signed a request. A refused signature is answered only after its source's failed-login
/// hold, as a refused AMQP or HTTP login is.
async fn authenticate(
    state: &SqsState,
    request: &sigv4::Request<'_>,
    peer: Option<SocketAddr>,
) -> Result<Signer, SqsError> {
    let now_ms = (state.clock)();
    let now = Timestamp::from_millis(now_ms);
    if let Some(addr) = peer {
        if let Admission::Refuse { hold_ms } = state.logins.admit(addr.ip(), now) {
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
            return Err(SqsError::InvalidSignature(sigv4::SignatureError::Mismatch));
        }
    }
    let loopback = peer.is_none_or(|addr| addr.ip().to_canonical().is_loopback());
    let checked = sigv4::parse(request).and_then(|claimed| {
        let key = credentials::secret_of(state, &claimed.access_key, loopback)?;
        sigv4::verify(request, &claimed, &key.secret, now_ms)?;
        Ok(Signer {
            user: key.user,
            access_key: claimed.access_key,
            vhost: key.vhost,
            region: claimed.region,
        })
    });
    match checked {
        Ok(found) => Ok(found),
        Err(reason) => {
            let hold_ms = peer.map_or(0, |addr| state.logins.record_failure(addr.ip(), now));
            let peer = peer.map(|a| a.to_string()).unwrap_or_default();
            tracing::warn!(%peer, %reason, hold_ms, "SQS request refused");
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
            Err(SqsError::InvalidSignature(reason))
        }
    }
}

fn json_response(status: axum::http::StatusCode, body: &Value, query_error: Option<String>) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    if let Some(value) = query_error.and_then(|q| HeaderValue::from_str(&q).ok()) {
        headers.insert("x-amzn-query-error", value);
    }
    response
}

fn xml_response(status: axum::http::StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
    response
}

fn error_response(error: &SqsError) -> Response {
    let body = serde_json::json!({
        "__type": format!("{}#{}", error.namespace(), error.type_name()),
        "message": error.to_string(),
    });
    json_response(error.status(), &body, Some(error.query_error()))
}
