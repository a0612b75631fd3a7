//! Message operations: SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch),
//! ChangeMessageVisibility(Batch). Messages go through the broker's SQS gateway
//! (`hourglass_broker::admin`, `sqs_gateway.rs`): a message sent here is an ordinary persistent
//! message of the queue, and any message of the queue, published over AMQP or SQS, is received.

use std::time::Duration;

use bytes::Bytes;
use hourglass_broker::admin::{SendRefused, SqsGatewayError, SqsReceived, SqsSent};
use hourglass_broker::requests::{
    ChangeVisibilityBatch, SqsDeleteBatch, SqsOutgoing, SqsReceive, SqsSendBatch, SqsUnwait, SqsWait,
};
use hourglass_broker::{Access, Resource, Ticket, VisibilityError};
use hourglass_mgmt::BrokerHandle;
use hourglass_wire::{BasicProperties, FieldTable, FieldValue, ShortStr};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{json, Map, Value};

use crate::attributes::{self, Attributes};
use crate::error::SqsError;
use crate::fifo;
use crate::queues::{self, QueueRef};
use crate::request::Input;
use crate::system_attributes;
use crate::{Caller, SqsState};

/// When a message was sent over SQS (Unix ms): `SentTimestamp`.
const SENT_HEADER: &str = "x-sqs-sent-timestamp";
/// AWS: at most 10 messages a receive.
const RECEIVE_MAX: i64 = 10;
/// AWS: a batch's messages together at most 1 MiB.
const BATCH_BYTES_MAX: usize = queues::MESSAGE_SIZE_MAX as usize;

/// One entry's answer: its fields, or why it failed.
type Answer = Result<Map<String, Value>, SqsError>;

fn queue_of(caller: &Caller, input: &Input<'_>) -> Result<QueueRef, SqsError> {
    queues::queue_named(caller, input)
}

pub(crate) fn gateway_error(error: SqsGatewayError, handle: &str) -> SqsError {
    match error {
        SqsGatewayError::QueueNotFound => SqsError::QueueDoesNotExist,
        SqsGatewayError::QueueLocked => {
            SqsError::AccessDenied("the queue is exclusive to an AMQP connection".into())
        }
        SqsGatewayError::QueueFull => SqsError::OverLimit("The queue is full.".into()),
        SqsGatewayError::InvalidArguments(why) => SqsError::InvalidAttributeValue(why),
        SqsGatewayError::ReceiptHandleInvalid => SqsError::ReceiptHandleIsInvalid(handle.to_owned()),
        SqsGatewayError::Send(refused) => send_refused(refused),
    }
}

/// What SQS answers a send its queue refuses.
fn send_refused(refused: SendRefused) -> SqsError {
    let invalid = |text: String| SqsError::InvalidParameterValue(text);
    match refused {
        SendRefused::TooLong { max } => invalid(format!(
            "One or more parameters are invalid. Reason: Message must be shorter than {max} bytes."
        )),
        SendRefused::DelayOnFifo => invalid(
            "Value for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.".into(),
        ),
        SendRefused::GroupIdMissing => SqsError::MissingParameter("MessageGroupId"),
        SendRefused::DeduplicationIdMissing => invalid(
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly".into(),
        ),
        SendRefused::DeduplicationIdOnStandard => invalid(
            "The request include parameter MessageDeduplicationId that is not valid for this queue type".into(),
        ),
    }
}

/// SQS's allowed characters: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to
/// #x10FFFF.
fn check_body(body: &str) -> Result<(), SqsError> {
    let allowed = |c: char| matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}');
    match body.chars().find(|c| !allowed(*c)) {
        None if !body.is_empty() => Ok(()),
        None => Err(SqsError::MissingParameter("MessageBody")),
        Some(c) => Err(SqsError::InvalidMessageContents(format!("Invalid binary character '#x{:X}' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF", c as u32))),
    }
}

/// A message ready to send: checked, with its properties and the answer's fields.
struct Outgoing {
    message: SqsOutgoing,
    answer: Map<String, Value>,
}

/// A message to send by `sender` (the key's user, kept as the AMQP `user_id`: what SenderId
/// reports), checked as far as it can be without its queue: the queue's settings decide on its
/// size, group and deduplication id (`hourglass_broker::admin::SqsOutgoing`).
fn outgoing(input: &Input<'_>, (sender, now_ms): (&str, u64)) -> Result<Outgoing, SqsError> {
    let body = input.required("MessageBody")?;
    check_body(body)?;
    let group_id = input.string("MessageGroupId")?;
    if let Some(group) = group_id {
        fifo::check_id("MessageGroupId", group)?;
    }
    let deduplication_id = input.string("MessageDeduplicationId")?;
    if let Some(id) = deduplication_id {
        fifo::check_id("MessageDeduplicationId", id)?;
    }
    let delay_ms = input.integer("DelaySeconds", 0..=900)?.map(|s| s as u64 * 1000);
    let attributes = attributes::from_json(input.value("MessageAttributes"))?;
    let system = system_attributes::from_json(input.value("MessageSystemAttributes"))?;
    let message_id = random_uuid();
    let mut headers = attributes::to_headers(&attributes);
    headers.push((SENT_HEADER.to_owned(), FieldValue::I64(now_ms as i64)));
    headers.extend(system_attributes::to_headers(&system));
    let properties = BasicProperties {
        delivery_mode: Some(2),
        message_id: ShortStr::try_from(message_id.as_str()).ok(),
        user_id: ShortStr::try_from(sender).ok(),
        timestamp: Some(now_ms / 1000),
        headers: Some(FieldTable::from_entries(headers)),
        ..Default::default()
    };
    let mut answer = Map::new();
    answer.insert("MessageId".into(), json!(message_id));
    answer.insert("MD5OfMessageBody".into(), json!(attributes::md5_of_body(body.as_bytes())));
    if let Some(md5) = attributes::md5_of_attributes(&attributes) {
        answer.insert("MD5OfMessageAttributes".into(), json!(md5));
    }
    if let Some(md5) = system_attributes::md5(&system) {
        answer.insert("MD5OfMessageSystemAttributes".into(), json!(md5));
    }
    Ok(Outgoing {
        message: SqsOutgoing {
            properties,
            body: Bytes::copy_from_slice(body.as_bytes()),
            delay_ms,
            size: body.len() + attributes::size(&attributes),
            group_id: group_id.map(str::to_owned),
            deduplication_id: deduplication_id.map(str::to_owned),
        },
        answer,
    })
}

/// A random (version 4) UUID, as SQS's message and request ids are.
pub(crate) fn random_uuid() -> String {
    let mut bytes = [0u8; 16];
    // The OS random source failing is not something a broker can go on without.
    SystemRandom::new().fill(&mut bytes).expect("the operating system's random source failed");
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = crate::sigv4::hex(&bytes);
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// What a send needs: no memory or disk alarm in effect, and write permission.
fn require_send(state: &SqsState, caller: &Caller, queue: &QueueRef) -> Result<(), SqsError> {
    if let Some(reason) = state.resources.borrow().blocked_reason() {
        return Err(SqsError::ResourceAlarm(reason));
    }
    queues::require_vhost(state, &queue.vhost)?;
    // A send is a publish to the default exchange: RabbitMQ checks write on it.
    if queues::permissions(state, caller, &queue.vhost).allows(Access::Write, Resource::Exchange, "") {
        Ok(())
    } else {
        Err(SqsError::AccessDenied(format!("exchange 'amq.default' in vhost '{}'", queue.vhost)))
    }
}

/// Sends each message, all in one broker request, answered once what it changed is durable (a
/// message sent to a durable queue: on disk, as a publisher confirm means).
async fn send_all(
    state: &SqsState,
    queue: &QueueRef,
    messages: Vec<Outgoing>,
) -> Result<Vec<Answer>, SqsError> {
    let (messages, answers): (Vec<_>, Vec<_>) = messages.into_iter().map(|m| (m.message, m.answer)).unzip();
    let batch = SqsSendBatch { vhost: queue.vhost.clone(), queue: queue.name.clone(), messages };
    let sent = state.broker.request(batch).await?;
    let answer = |(sent, mut answer): (Result<SqsSent, SqsGatewayError>, Map<String, Value>)| {
        let sent = sent.map_err(|e| gateway_error(e, ""))?;
        if let SqsSent::Duplicate { original: Some(id), .. } = &sent {
            // Accepted and not stored again, as SQS answers: with the first message's id.
            answer.insert("MessageId".into(), json!(id.as_str()));
        }
        if let Some(number) = sent.sequence_number() {
            answer.insert("SequenceNumber".into(), json!(number.to_string()));
        }
        Ok(answer)
    };
    Ok(sent.into_iter().zip(answers).map(answer).collect())
}

pub async fn send(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_of(caller, input)?;
    require_send(state, caller, &queue)?;
    let message = outgoing(input, (&caller.user, (state.clock)()))?;
    let mut sent = send_all(state, &queue, vec![message]).await?;
    Ok(Value::Object(sent.remove(0)?))
}

pub async fn send_batch(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_of(caller, input)?;
    require_send(state, caller, &queue)?;
    let entries = input.batch("SendMessageBatchRequestEntry")?;
    let bytes: usize =
        entries.iter().filter_map(|(_, e)| e.string("MessageBody").ok().flatten()).map(str::len).sum();
    if bytes > BATCH_BYTES_MAX {
        return Err(SqsError::BatchRequestTooLong(bytes));
    }
    let now_ms = (state.clock)();
    run_batch(
        entries,
        |entry| outgoing(entry, (&caller.user, now_ms)),
        |messages| send_all(state, &queue, messages),
    )
    .await
}

/// The answer to a batch: each entry read by `parse` (one it refuses fails alone), the rest
/// acted on together by `act`, which answers each in order.
async fn run_batch<T, Fut>(
    entries: Vec<(String, Input<'_>)>,
    parse: impl Fn(&Input<'_>) -> Result<T, SqsError>,
    act: impl FnOnce(Vec<T>) -> Fut,
) -> Result<Value, SqsError>
where
    Fut: std::future::Future<Output = Result<Vec<Answer>, SqsError>>,
{
    let (mut ids, mut items, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for (id, entry) in &entries {
        match parse(entry) {
            Ok(item) => {
                ids.push(id.clone());
                items.push(item);
            }
            Err(error) => failed.push(failure(id, &error)),
        }
    }
    let mut successful = Vec::new();
    for (id, result) in ids.into_iter().zip(act(items).await?) {
        match result {
            Ok(mut answer) => {
                answer.insert("Id".into(), json!(id));
                successful.push(Value::Object(answer));
            }
            Err(error) => failed.push(failure(&id, &error)),
        }
    }
    Ok(json!({"Successful": successful, "Failed": failed}))
}

/// A batch entry's failure, as `BatchResultErrorEntry`.
fn failure(id: &str, error: &SqsError) -> Value {
    let code = error.query_error();
    let code = code.split(';').next().unwrap_or_default();
    json!({"Id": id, "SenderFault": !error.status().is_server_error(), "Code": code, "Message": error.to_string()})
}

/// How long after it began a receive may still wait for its queue's paged head to be read
/// (`SqsReceipt::reading`) when its own wait time is shorter: a read takes milliseconds; past
/// this the receive answers what it has.
const READ_WAIT_MAX: Duration = Duration::from_secs(5);

pub async fn receive(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_of(caller, input)?;
    queues::require(state, caller, Access::Read, &queue)?;
    let max = input.integer("MaxNumberOfMessages", 1..=RECEIVE_MAX)?.unwrap_or(1) as usize;
    let visibility = input.integer("VisibilityTimeout", 0..=queues::VISIBILITY_TIMEOUT_MAX_S)?;
    let wait = input.integer("WaitTimeSeconds", 0..=queues::WAIT_TIME_MAX_S)?;
    let mut system = input.strings("AttributeNames")?;
    system.extend(input.strings("MessageSystemAttributeNames")?);
    let wanted_attributes = input.strings("MessageAttributeNames")?;
    // `None`: the queue's visibility timeout as it runs, policies applied, or its SQS 0
    // (`Broker::sqs_receive`): the queue's settings are read where it is, in one request.
    let visibility_ms = visibility.map(|s| s as u64 * 1000);
    let started = tokio::time::Instant::now();
    // Known from the first receive: the request's wait, else the queue's default.
    let mut deadline = None;
    // Taken when the poll first has to wait, kept until it answers.
    let mut waiting = None;
    let received = loop {
        let receive =
            SqsReceive { vhost: queue.vhost.clone(), queue: queue.name.clone(), max, visibility_ms };
        let got = state.broker.request(receive).await?.map_err(|e| gateway_error(e, ""))?;
        let wait_s = wait.map(|s| s as u64).or(got.wait_s).unwrap_or(0).min(queues::WAIT_TIME_MAX_S as u64);
        let deadline = *deadline.get_or_insert(started + Duration::from_secs(wait_s));
        // A paged head being read has messages for this receive: even a short poll waits for
        // the read (AWS answers a short poll on a deep queue with messages), within a bound.
        let until = if got.reading { deadline.max(started + READ_WAIT_MAX) } else { deadline };
        if !got.messages.is_empty() || tokio::time::Instant::now() >= until {
            break got.messages;
        }
        if waiting.is_none() {
            match state.long_polls.admit(&caller.access_key, caller.address) {
                Ok(admitted) => waiting = Some(admitted),
                // A short poll is never throttled: past the bound it answers what it took.
                Err(_) if wait_s == 0 => break got.messages,
                Err(refused) => return Err(refused),
            }
        }
        wait_for_a_message(state, &queue, until).await?;
    };
    drop(waiting);
    let now_ms = (state.clock)();
    let messages: Vec<Value> =
        received.iter().map(|r| received_json(r, &system, &wanted_attributes, now_ms)).collect();
    if messages.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({"Messages": messages}))
}

/// Waits until `queue` has a ready message or `deadline` passes: the broker wakes the wait
/// (`sqs_wait`), so a waiting long poll runs no job and holds only its ticket there and a
/// channel in the broker task's `JobRunner`. A wait that ends without a wake-up, or is dropped with its request, is taken back.
async fn wait_for_a_message(
    state: &SqsState,
    queue: &QueueRef,
    deadline: tokio::time::Instant,
) -> Result<(), SqsError> {
    let wait = SqsWait { vhost: queue.vhost.clone(), queue: queue.name.clone() };
    let (ticket, woken) = state.broker.wait_for_sqs_message(wait).await?.map_err(|e| gateway_error(e, ""))?;
    let _taken_back = TakeBack { broker: state.broker.clone(), ticket };
    // The wake-up may have come before this await: the channel keeps it.
    let _ = tokio::time::timeout_at(deadline, woken).await;
    Ok(())
}

/// Takes a long poll's wait back from the broker when it ends (`sqs_unwait`; nothing for one
/// the broker already woke).
struct TakeBack {
    broker: BrokerHandle,
    ticket: Ticket,
}

impl Drop for TakeBack {
    fn drop(&mut self) {
        let (broker, ticket) = (self.broker.clone(), self.ticket);
        tokio::spawn(async move {
            let _ = broker.request(SqsUnwait { ticket }).await;
        });
    }
}

/// A received message as ReceiveMessage answers it.
fn received_json(received: &SqsReceived, system: &[String], wanted: &[String], now_ms: u64) -> Value {
    let properties = received.message.properties().decode();
    let headers = properties.headers.as_ref();
    let body = String::from_utf8_lossy(&received.message.body);
    let message_id =
        properties.message_id.as_ref().map(|id| id.as_str().into_owned()).unwrap_or_else(|| {
            format!("00000000-0000-4000-8000-{:012x}", received.entry_id & 0xffff_ffff_ffff)
        });
    let mut out = Map::new();
    out.insert("MessageId".into(), json!(message_id));
    out.insert("ReceiptHandle".into(), json!(received.receipt_handle));
    out.insert("MD5OfBody".into(), json!(attributes::md5_of_body(body.as_bytes())));
    out.insert("Body".into(), json!(body));
    let wants = |name: &str| system.iter().any(|s| s == "All" || s == name);
    let mut returned = Map::new();
    // Sent over SQS: the send's time; over AMQP: the publisher's `timestamp` (seconds), else
    // when the broker made it ready in this queue (issue 40, item 3: AWS always answers it).
    let sent_ms = match headers.and_then(|h| h.get(SENT_HEADER)) {
        Some(value) => value.as_i64().map(|ms| ms as u64),
        None => properties.timestamp.map(|s| s * 1000).or(received.ready_ms),
    };
    if let (true, Some(sent)) = (wants("SentTimestamp"), sent_ms) {
        returned.insert("SentTimestamp".into(), json!(sent.to_string()));
    }
    if wants("ApproximateReceiveCount") {
        returned.insert("ApproximateReceiveCount".into(), json!(received.receive_count.to_string()));
    }
    if wants("ApproximateFirstReceiveTimestamp") && received.receive_count == 1 {
        returned.insert("ApproximateFirstReceiveTimestamp".into(), json!(now_ms.to_string()));
    }
    fifo::received_attributes(headers, wants, &mut returned);
    if let (true, Some(trace)) =
        (wants(system_attributes::AWS_TRACE_HEADER), system_attributes::trace_header(headers))
    {
        returned.insert(system_attributes::AWS_TRACE_HEADER.into(), json!(trace));
    }
    // Who sent it: an SQS send's key user, or an AMQP publisher's validated `user_id`. An AMQP
    // message without one names no sender, and none is made up (it was the receiver's name).
    if let (true, Some(sender)) = (wants("SenderId"), properties.user_id.as_ref()) {
        returned.insert("SenderId".into(), json!(sender.as_str()));
    }
    if !returned.is_empty() {
        out.insert("Attributes".into(), Value::Object(returned));
    }
    let chosen: Attributes = attributes::selected(attributes::from_headers(headers), wanted);
    if let Some(md5) = attributes::md5_of_attributes(&chosen) {
        out.insert("MD5OfMessageAttributes".into(), json!(md5));
        out.insert("MessageAttributes".into(), attributes::to_json(&chosen));
    }
    Value::Object(out)
}

pub async fn delete(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_of(caller, input)?;
    queues::require(state, caller, Access::Read, &queue)?;
    let handle = input.required("ReceiptHandle")?.to_owned();
    delete_all(state, &queue, vec![handle]).await?.remove(0)?;
    Ok(json!({}))
}

/// Deletes by each handle.
async fn delete_all(
    state: &SqsState,
    queue: &QueueRef,
    handles: Vec<String>,
) -> Result<Vec<Answer>, SqsError> {
    let batch = SqsDeleteBatch { vhost: queue.vhost.clone(), queue: queue.name.clone(), handles };
    let deleted = state.broker.request(batch).await?;
    let answer = |(handle, deleted): (String, Result<(), SqsGatewayError>)| {
        deleted.map(|()| Map::new()).map_err(|e| gateway_error(e, &handle))
    };
    Ok(deleted.into_iter().map(answer).collect())
}

pub async fn delete_batch(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_of(caller, input)?;
    queues::require(state, caller, Access::Read, &queue)?;
    let entries = input.batch("DeleteMessageBatchRequestEntry")?;
    let handle = |entry: &Input<'_>| entry.required("ReceiptHandle").map(str::to_owned);
    run_batch(entries, handle, |handles| delete_all(state, &queue, handles)).await
}

pub async fn change_visibility(
    state: &SqsState,
    caller: &Caller,
    input: &Input<'_>,
) -> Result<Value, SqsError> {
    let queue = queue_of(caller, input)?;
    queues::require(state, caller, Access::Read, &queue)?;
    let change = visibility_change(input)?;
    change_all(state, &queue, vec![change]).await?.remove(0)?;
    Ok(json!({}))
}

fn visibility_change(input: &Input<'_>) -> Result<(String, u64), SqsError> {
    let handle = input.required("ReceiptHandle")?.to_owned();
    let seconds = input
        .integer("VisibilityTimeout", 0..=queues::VISIBILITY_TIMEOUT_MAX_S)?
        .ok_or(SqsError::MissingParameter("VisibilityTimeout"))?;
    Ok((handle, seconds as u64 * 1000))
}

/// Changes the visibility timeout of each handle's delivery.
async fn change_all(
    state: &SqsState,
    queue: &QueueRef,
    changes: Vec<(String, u64)>,
) -> Result<Vec<Answer>, SqsError> {
    let batch = ChangeVisibilityBatch { vhost: queue.vhost.clone(), queue: queue.name.clone(), changes };
    let changed = state.broker.request(batch).await?;
    let answer = |((handle, ms), changed): ((String, u64), Result<(), VisibilityError>)| {
        match changed {
            // An expired handle whose message waits in the queue: AWS answers a success that
            // changes nothing (LocalStack checked this against AWS).
            Ok(()) | Err(VisibilityError::Expired) => Ok(Map::new()),
            Err(VisibilityError::QueueNotFound) => Err(SqsError::QueueDoesNotExist),
            Err(VisibilityError::HandleInvalid) => Err(SqsError::ReceiptHandleIsInvalid(handle.clone())),
            // AWS's answer to a handle whose message was received again, or deleted.
            Err(VisibilityError::HandleNotFound) => Err(SqsError::InvalidParameterValue(format!(
                "Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."
            ))),
            Err(VisibilityError::BeyondLimit) => Err(SqsError::InvalidParameterValue(format!(
                "Value {} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]",
                ms / 1000
            ))),
        }
    };
    Ok(changed.into_iter().map(answer).collect())
}

pub async fn change_visibility_batch(
    state: &SqsState,
    caller: &Caller,
    input: &Input<'_>,
) -> Result<Value, SqsError> {
    let queue = queue_of(caller, input)?;
    queues::require(state, caller, Access::Read, &queue)?;
    let entries = input.batch("ChangeMessageVisibilityBatchRequestEntry")?;
    run_batch(entries, visibility_change, |changes| change_all(state, &queue, changes)).await
}
