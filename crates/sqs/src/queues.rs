//! Queue operations (CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue,
//! GetQueueAttributes) and queue URLs. An SQS queue is an ordinary durable queue: its SQS
//! attributes are queue arguments (docs/sqs.md has the table), and every queue of the vhost,
//! made over AMQP or SQS, is listed and usable.

use std::sync::Arc;

use hourglass_broker::api::AmqpError;
use hourglass_broker::requests::{
    AsUser, CallMethod, ChangeSqsArguments, DeclareSqsQueue, PurgeSqsQueue, QueueArguments,
    QueueDetailsNamed, QueueNameGroups, SqsDeadLetterSources, SqsDeclared,
};
use hourglass_broker::{Access, Permissions, Resource};
use hourglass_wire::{FieldTable, FieldValue, LongStr, QueueDeclare, QueueDelete, ShortStr};
use serde_json::{json, Map, Value};

use crate::error::SqsError;
use crate::request::Input;
use crate::{Caller, SqsState};

/// SQS's defaults and ranges, in seconds (AWS's API reference, CreateQueue).
pub const VISIBILITY_TIMEOUT_DEFAULT_S: i64 = 30;
pub const VISIBILITY_TIMEOUT_MAX_S: i64 = 43_200;
const DELAY_MAX_S: i64 = 900;
const RETENTION_DEFAULT_S: i64 = 345_600;
const RETENTION_RANGE_S: std::ops::RangeInclusive<i64> = 60..=1_209_600;
/// AWS's largest message (and batch) since August 2025: 1 MiB, also the default (the broker
/// checks a send against its queue's, `SqsArgs`).
pub const MESSAGE_SIZE_MAX: i64 = hourglass_broker::queue::sqs_args::SQS_MESSAGE_SIZE_MAX as i64;
const MESSAGE_SIZE_RANGE: std::ops::RangeInclusive<i64> = 1_024..=MESSAGE_SIZE_MAX;
pub const WAIT_TIME_MAX_S: i64 = 20;
/// The arguments that hold SQS attributes AMQP has no argument for.
pub const MAXIMUM_MESSAGE_SIZE_ARG: &str = "x-sqs-maximum-message-size";
pub const RECEIVE_WAIT_ARG: &str = "x-sqs-receive-message-wait-time-seconds";
/// The argument that holds a queue's tags (a table of strings).
const TAGS_ARG: &str = "x-sqs-tags";
/// When a queue was made over SQS and last changed by SetQueueAttributes (epoch seconds).
const CREATED_ARG: &str = "x-sqs-created-timestamp";
/// A queue's `VisibilityTimeout` of 0, which AMQP's `x-visibility-timeout` (1 s to 12 h) cannot
/// hold: such a queue has no `x-visibility-timeout`, and SQS receives default to 0.
pub const ZERO_VISIBILITY_ARG: &str = "x-sqs-visibility-timeout";
const MODIFIED_ARG: &str = "x-sqs-last-modified-timestamp";
/// AWS's limits on tags: 50 a queue, keys of 1 to 128 characters, values of up to 256.
const TAGS_MAX: usize = 50;
const TAG_KEY_LEN_MAX: usize = 128;
const TAG_VALUE_LEN_MAX: usize = 256;
/// The account an ARN names for the vhost `/` (other vhosts are named by themselves).
const DEFAULT_VHOST_ACCOUNT: &str = "000000000000";
/// ListQueues' most URLs an answer.
const LIST_MAX: usize = 1000;

/// A queue an operation names: its vhost and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRef {
    pub vhost: String,
    pub name: String,
}

/// The queue a request's `QueueUrl` names: a URL, or a bare queue name in the caller's vhost
/// (AWS takes both). A URL that names no queue of this endpoint is a queue that does not exist,
/// as AWS answers it.
pub fn queue_named(caller: &Caller, input: &Input<'_>) -> Result<QueueRef, SqsError> {
    let url = input.required("QueueUrl")?;
    if !url.contains('/') {
        if url.is_empty() || url.len() > ShortStr::MAX_LEN {
            return Err(SqsError::QueueDoesNotExist);
        }
        return Ok(QueueRef { vhost: caller.vhost.clone(), name: url.to_owned() });
    }
    queue_of_url(url).map_err(|_| SqsError::QueueDoesNotExist)
}

/// The queue a `QueueUrl` names: `{base}/{vhost}/{queue}`, each percent-encoded (the vhost `/`
/// is `%2F`, or AWS's account-shaped `000000000000`).
pub fn queue_of_url(url: &str) -> Result<QueueRef, SqsError> {
    let invalid = || {
        SqsError::InvalidParameterValue(format!(
            "Value {url} for parameter QueueUrl is invalid. Reason: not a queue URL of this endpoint."
        ))
    };
    let path = url.split_once("://").map_or(url, |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p));
    let mut segments = path.trim_end_matches('/').split('/');
    let (Some(vhost), Some(name), None) = (segments.next(), segments.next(), segments.next()) else {
        return Err(invalid());
    };
    let vhost = crate::sigv4::percent_decode(vhost).map_err(|_| invalid())?;
    let name = crate::sigv4::percent_decode(name).map_err(|_| invalid())?;
    let vhost = if vhost == DEFAULT_VHOST_ACCOUNT { "/".to_owned() } else { vhost };
    if name.is_empty() || name.len() > ShortStr::MAX_LEN {
        return Err(invalid());
    }
    Ok(QueueRef { vhost, name })
}

/// The queue an ARN names: `arn:aws:sqs:{region}:{account}:{queue}`, the account
/// `000000000000` for the vhost `/` and the percent-encoded vhost otherwise (`arn_of`).
pub fn queue_of_arn(arn: &str) -> Result<QueueRef, SqsError> {
    let invalid =
        || SqsError::InvalidParameterValue(format!("{arn} is not the ARN of a queue of this endpoint."));
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ["arn", "aws", "sqs", _region, account, name] = parts.as_slice() else { return Err(invalid()) };
    let vhost = if *account == DEFAULT_VHOST_ACCOUNT {
        "/".to_owned()
    } else {
        crate::sigv4::percent_decode(account).map_err(|_| invalid())?
    };
    if name.is_empty() || name.len() > ShortStr::MAX_LEN {
        return Err(invalid());
    }
    Ok(QueueRef { vhost, name: (*name).to_owned() })
}

/// The URL of queue `name` in `vhost`, on the address the caller used.
pub fn url_of(caller: &Caller, vhost: &str, name: &str) -> String {
    format!("{}/{}/{}", caller.base_url, encode(vhost), encode(name))
}

/// The queue's ARN, as RedrivePolicy names a dead-letter queue.
pub(crate) fn arn_of(caller: &Caller, vhost: &str, name: &str) -> String {
    format!("arn:aws:sqs:{}:{}:{name}", caller.region, account_of(vhost))
}

/// The account id a vhost's queues have in ARNs (and a policy names).
pub(crate) fn account_of(vhost: &str) -> String {
    if vhost == "/" {
        DEFAULT_VHOST_ACCOUNT.to_owned()
    } else {
        encode(vhost)
    }
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// SQS's queue names: 1 to 80 letters, digits, `-` and `_`; a FIFO queue's end in `.fifo`.
fn check_sqs_name(name: &str, fifo: bool) -> Result<(), SqsError> {
    if fifo || fifo::is_fifo_name(name) {
        return fifo::check_name(name).and_then(|()| {
            if fifo {
                Ok(())
            } else {
                Err(SqsError::InvalidParameterValue(
                    "A queue whose name ends in .fifo is a FIFO queue: set its FifoQueue attribute to true."
                        .into(),
                ))
            }
        });
    }
    let valid = (1..=80).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(SqsError::InvalidParameterValue(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length".into(),
        ))
    }
}

/// The caller's permissions in `vhost`.
pub fn permissions(state: &SqsState, caller: &Caller, vhost: &str) -> Arc<Permissions> {
    state.users.compiled_permissions(vhost, &caller.user)
}

/// AccessDenied unless the caller may do `access` on queue `queue`.
pub fn require(state: &SqsState, caller: &Caller, access: Access, queue: &QueueRef) -> Result<(), SqsError> {
    require_vhost(state, &queue.vhost)?;
    if permissions(state, caller, &queue.vhost).allows(access, Resource::Queue, &queue.name) {
        Ok(())
    } else {
        Err(SqsError::AccessDenied(format!("queue '{}' in vhost '{}'", queue.name, queue.vhost)))
    }
}

/// QueueDoesNotExist when a queue URL or ARN names a vhost that does not exist: no queue is
/// there, whoever asks (AWS answers a queue of an unknown account the same way).
pub fn require_vhost(state: &SqsState, vhost: &str) -> Result<(), SqsError> {
    state.users.vhost(vhost).map(|_| ()).ok_or(SqsError::QueueDoesNotExist)
}

/// An AMQP refusal of an operation on a queue, in SQS's terms.
fn from_amqp(error: AmqpError) -> SqsError {
    match error.reply_code {
        403 => SqsError::AccessDenied(error.reply_text),
        404 => SqsError::QueueDoesNotExist,
        406 => SqsError::QueueNameExists(format!(
            "A queue already exists with the same name and a different value for an attribute ({})",
            error.reply_text
        )),
        _ => SqsError::InvalidParameterValue(error.reply_text),
    }
}

use crate::fifo::{self, ArgumentChange};

/// What CreateQueue's `Attributes` set among the queue's arguments (docs/sqs.md), a FIFO queue's
/// own included: what an existing queue is compared on. Each with the attribute that set it,
/// which an answer names (AWS: "a different value for attribute VisibilityTimeout"; a FIFO
/// queue's own arguments are `FifoQueue`'s).
fn given_arguments(
    caller: &Caller,
    vhost: &str,
    attributes: &[(String, String)],
    fifo: bool,
) -> Result<Vec<(ArgumentChange, String)>, SqsError> {
    let mut given: Vec<(ArgumentChange, String)> = if fifo {
        fifo::creation_arguments().into_iter().map(|change| (change, "FifoQueue".to_owned())).collect()
    } else {
        Vec::new()
    };
    for (name, value) in attributes.iter().filter(|(name, _)| name != "FifoQueue") {
        for (key, value) in attribute_arguments(caller, vhost, name, value, fifo)? {
            given.retain(|((k, _), _)| *k != key);
            given.push(((key, value), name.clone()));
        }
    }
    Ok(given)
}

/// A new queue's arguments: SQS's default retention period, then what its attributes `given` set,
/// and when it was made (`CreatedTimestamp`).
///
/// SQS's default visibility timeout (30 s) is not stored: it is what a receive uses when neither
/// the queue nor a policy sets one, so a user policy's `visibility-timeout` applies to a queue
/// made without `VisibilityTimeout` (issue 41). Its AMQP consumers have no visibility timeout
/// unless a policy gives one, like those of any queue declared without `x-visibility-timeout`.
fn arguments_for_new_queue(given: &[(ArgumentChange, String)], created_s: u64) -> FieldTable {
    let mut args: Vec<ArgumentChange> = vec![
        ("x-message-ttl".into(), Some(FieldValue::I64(RETENTION_DEFAULT_S * 1000))),
        (CREATED_ARG.into(), Some(FieldValue::I64(created_s as i64))),
    ];
    for ((key, value), _) in given {
        args.retain(|(k, _)| k != key);
        args.push((key.clone(), value.clone()));
    }
    let mut set: Vec<(String, FieldValue)> = args.into_iter().filter_map(|(k, v)| Some((k, v?))).collect();
    set.sort_by(|a, b| a.0.cmp(&b.0));
    FieldTable::from_entries(set)
}

/// What one SQS queue attribute sets among the queue's arguments (docs/sqs.md).
fn attribute_arguments(
    caller: &Caller,
    vhost: &str,
    name: &str,
    value: &str,
    fifo: bool,
) -> Result<Vec<ArgumentChange>, SqsError> {
    if let Some(changes) = fifo::attribute_arguments(name, value, fifo) {
        return changes;
    }
    let seconds = |range: std::ops::RangeInclusive<i64>| -> Result<i64, SqsError> {
        value.parse::<i64>().ok().filter(|v| range.contains(v)).ok_or_else(|| {
            SqsError::InvalidAttributeValue(format!("Invalid value for the parameter {name}."))
        })
    };
    let set = |key: &str, value: i64| vec![(key.to_owned(), Some(FieldValue::I64(value)))];
    Ok(match name {
        "VisibilityTimeout" => match seconds(0..=VISIBILITY_TIMEOUT_MAX_S)? {
            0 => vec![
                ("x-visibility-timeout".to_owned(), None),
                (ZERO_VISIBILITY_ARG.to_owned(), Some(FieldValue::I64(0))),
            ],
            timeout => {
                vec![
                    ("x-visibility-timeout".to_owned(), Some(FieldValue::I64(timeout * 1000))),
                    (ZERO_VISIBILITY_ARG.to_owned(), None),
                ]
            }
        },
        "MessageRetentionPeriod" => set("x-message-ttl", seconds(RETENTION_RANGE_S)? * 1000),
        "DelaySeconds" => match seconds(0..=DELAY_MAX_S)? {
            0 => vec![("x-delivery-delay".to_owned(), None)],
            delay => set("x-delivery-delay", delay * 1000),
        },
        "MaximumMessageSize" => set(MAXIMUM_MESSAGE_SIZE_ARG, seconds(MESSAGE_SIZE_RANGE)?),
        "ReceiveMessageWaitTimeSeconds" => set(RECEIVE_WAIT_ARG, seconds(0..=WAIT_TIME_MAX_S)?),
        "RedrivePolicy" if value.is_empty() => {
            REDRIVE_ARGS.iter().map(|key| ((*key).to_owned(), None)).collect()
        }
        "RedrivePolicy" => {
            redrive_arguments(caller, vhost, value, fifo)?.into_iter().map(|(k, v)| (k, Some(v))).collect()
        }
        "FifoQueue" => {
            return Err(SqsError::InvalidAttributeValue(
                "FifoQueue cannot be changed: a queue is FIFO or standard from its creation.".into(),
            ))
        }
        // Kept and shown as given (infrastructure tools write and read them back). Encryption at
        // rest is the disk's; access is by Hourglass permissions, less what a Policy's Deny
        // statements take away (policy.rs).
        _ => match stored_attribute(name) {
            Some(key) => {
                check_stored_attribute(name, value)?;
                let value = (!value.is_empty()).then(|| FieldValue::LongStr(LongStr::from(value.to_owned())));
                vec![(key.to_owned(), value)]
            }
            None => return Err(SqsError::InvalidAttributeName(name.to_owned())),
        },
    })
}

/// The attributes kept as given, each in its own argument: `(attribute, argument)`.
const STORED_ATTRIBUTES: [(&str, &str); 5] = [
    ("Policy", crate::policy::POLICY_ARG),
    ("RedriveAllowPolicy", "x-sqs-redrive-allow-policy"),
    ("KmsMasterKeyId", "x-sqs-kms-master-key-id"),
    ("KmsDataKeyReusePeriodSeconds", "x-sqs-kms-data-key-reuse-period-seconds"),
    ("SqsManagedSseEnabled", "x-sqs-managed-sse-enabled"),
];

/// The argument that keeps attribute `name`, if it is one of `STORED_ATTRIBUTES`.
fn stored_attribute(name: &str) -> Option<&'static str> {
    STORED_ATTRIBUTES.iter().find(|(attribute, _)| *attribute == name).map(|(_, key)| *key)
}

/// AWS's checks of the kept attributes: policies are JSON objects of at most 20 KiB, the reuse
/// period 60 to 86,400 s, `SqsManagedSseEnabled` a boolean. An empty value removes one.
fn check_stored_attribute(name: &str, value: &str) -> Result<(), SqsError> {
    let valid = value.is_empty()
        || match name {
            "Policy" | "RedriveAllowPolicy" => {
                value.len() <= POLICY_MAX_BYTES
                    && serde_json::from_str::<Value>(value).is_ok_and(|v| v.is_object())
            }
            "KmsDataKeyReusePeriodSeconds" => value.parse::<u32>().is_ok_and(|s| (60..=86_400).contains(&s)),
            "SqsManagedSseEnabled" => value == "true" || value == "false",
            _ => value.len() <= KMS_KEY_ID_MAX_BYTES,
        };
    if !valid {
        return Err(SqsError::InvalidAttributeValue(format!("Invalid value for the parameter {name}.")));
    }
    match crate::policy::refusal(value).filter(|_| name == "Policy") {
        Some(why) => Err(SqsError::InvalidAttributeValue(format!(
            "Invalid value for the parameter Policy. Reason: {why}."
        ))),
        None => Ok(()),
    }
}

/// AWS: a queue policy of at most 20 KiB.
pub(crate) const POLICY_MAX_BYTES: usize = 20_480;
/// A KMS key id, alias or ARN: at most 2,048 characters (KMS's own limit on a key ARN is lower).
const KMS_KEY_ID_MAX_BYTES: usize = 2_048;

/// The arguments a `RedrivePolicy` sets.
const REDRIVE_ARGS: [&str; 3] = ["x-dead-letter-exchange", "x-dead-letter-routing-key", "x-delivery-limit"];

/// `RedrivePolicy` (`{"deadLetterTargetArn": …, "maxReceiveCount": N}`): dead-lettering to that
/// queue through the default exchange after N receives, as `x-delivery-limit` N−1 (the limit
/// counts failed deliveries; the N-th receive's failure goes past it). As on AWS, the
/// dead-letter queue of a FIFO queue (`fifo`) is a FIFO queue and that of a standard queue a
/// standard one, told apart by the `.fifo` their names must (and only theirs may) end in.
fn redrive_arguments(
    caller: &Caller,
    vhost: &str,
    policy: &str,
    fifo: bool,
) -> Result<Vec<(String, FieldValue)>, SqsError> {
    let invalid = |why: &str| {
        SqsError::InvalidAttributeValue(format!(
            "Value {policy} for parameter RedrivePolicy is invalid. Reason: {why}"
        ))
    };
    let policy: Value =
        serde_json::from_str(policy).map_err(|_| invalid("Redrive policy is not a valid JSON map."))?;
    let target = policy.get("deadLetterTargetArn").and_then(Value::as_str).ok_or_else(|| {
        invalid("Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
    })?;
    let count = match policy.get("maxReceiveCount") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let count = count.filter(|c| (1..=1000).contains(c)).ok_or_else(|| {
        let given = policy.get("maxReceiveCount").map(|v| v.to_string().trim_matches('"').to_owned());
        invalid(&format!(
            "Invalid value for maxReceiveCount: {}, valid values are from 1 to 1000 both inclusive.",
            given.unwrap_or_default()
        ))
    })?;
    let prefix = arn_of(caller, vhost, "");
    let dead_letter = target
        .strip_prefix(prefix.as_str())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid("Dead-letter target must be a queue of the same vhost."))?;
    match (fifo, fifo::is_fifo_name(dead_letter)) {
        (true, false) => return Err(invalid("Dead-letter queue of a FIFO queue must also be a FIFO queue.")),
        (false, true) => {
            return Err(invalid("Dead-letter queue of a standard queue must also be a standard queue."))
        }
        _ => {}
    }
    let [exchange, routing_key, limit] = REDRIVE_ARGS;
    Ok(vec![
        (exchange.into(), FieldValue::LongStr(LongStr::from(String::new()))),
        (routing_key.into(), FieldValue::LongStr(LongStr::from(dead_letter.to_owned()))),
        (limit.into(), FieldValue::I64(count - 1)),
    ])
}

fn short(name: &str) -> Result<ShortStr, SqsError> {
    ShortStr::try_from(name)
        .map_err(|_| SqsError::InvalidParameterValue(format!("queue name too long: {name}")))
}

/// CreateQueue: the queue made with its attributes' arguments (and SQS's defaults), or, when it
/// exists, its URL, unless an attribute given differs from the queue's (AWS: attributes not
/// given are not compared).
pub async fn create(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let name = input.required("QueueName")?;
    let attributes = input.string_map("Attributes")?;
    let fifo = match attributes.iter().find(|(n, _)| n == "FifoQueue").map(|(_, v)| v.as_str()) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(SqsError::InvalidAttributeValue("Invalid value for the parameter FifoQueue.".into()))
        }
    };
    check_sqs_name(name, fifo)?;
    let vhost = caller.vhost.clone();
    require(state, caller, Access::Configure, &QueueRef { vhost: vhost.clone(), name: name.to_owned() })?;
    let given = given_arguments(caller, &vhost, &attributes, fifo)?;
    let created_s = (state.clock)() / 1000;
    let mut arguments = arguments_for_new_queue(&given, created_s);
    let tags = input.string_map("tags")?;
    if !tags.is_empty() {
        arguments = arguments.with_entry(TAGS_ARG, tags_table(tags.into_iter().collect())?);
    }
    let declare = QueueDeclare { queue: short(name)?, durable: true, arguments, ..Default::default() };
    let who = AsUser {
        user: caller.user.clone(),
        vhost: vhost.clone(),
        permissions: permissions(state, caller, &vhost),
    };
    // One request: whether the queue exists and, if not, its declaration.
    match state.broker.request(DeclareSqsQueue { who, declare }).await? {
        SqsDeclared::Existing(existing) => {
            if let Some((_, attribute)) =
                given.iter().find(|((key, value), _)| !same_argument(&existing, key, value))
            {
                return Err(SqsError::QueueNameExists(format!(
                    "A queue already exists with the same name and a different value for attribute {attribute}"
                )));
            }
        }
        SqsDeclared::OverLimit(limit) => {
            return Err(SqsError::OverLimit(format!(
                "The vhost '{vhost}' holds its limit of {limit} queues (max-queues)."
            )))
        }
        SqsDeclared::Declared(declared) => declared.map_err(from_amqp)?,
    }
    Ok(json!({"QueueUrl": url_of(caller, &vhost, name)}))
}

/// Whether `arguments` holds `key` as `wanted` says (`None`: absent); integers of any width
/// compare by value (a queue declared over AMQP may hold a 32-bit one). A queue without a
/// visibility timeout of its own has SQS's default.
fn same_argument(arguments: &FieldTable, key: &str, wanted: &Option<FieldValue>) -> bool {
    let have = match arguments.get(key) {
        None if key == "x-visibility-timeout" && arguments.get(ZERO_VISIBILITY_ARG).is_none() => {
            Some(FieldValue::I64(VISIBILITY_TIMEOUT_DEFAULT_S * 1000))
        }
        have => have,
    };
    match (have, wanted) {
        (None, None) => true,
        (Some(have), Some(want)) => match (have.as_i64(), want.as_i64()) {
            (Some(a), Some(b)) => a == b,
            _ => have == *want,
        },
        _ => false,
    }
}

pub async fn get_url(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = QueueRef { vhost: caller.vhost.clone(), name: input.required("QueueName")?.to_owned() };
    existing(state, caller, &queue).await?;
    Ok(json!({"QueueUrl": url_of(caller, &queue.vhost, &queue.name)}))
}

/// The queue's details, when it exists and the caller may see it (a permission of any kind on
/// it: without one, SQS's answer is that it does not exist).
async fn existing(
    state: &SqsState,
    caller: &Caller,
    queue: &QueueRef,
) -> Result<hourglass_broker::admin::QueueDetails, SqsError> {
    let permissions = permissions(state, caller, &queue.vhost);
    let visible = [Access::Configure, Access::Write, Access::Read]
        .into_iter()
        .any(|a| permissions.allows(a, Resource::Queue, &queue.name));
    if !visible {
        return Err(SqsError::QueueDoesNotExist);
    }
    let named = QueueDetailsNamed { vhost: queue.vhost.clone(), name: queue.name.clone() };
    state.broker.ask(named).await?.ok_or(SqsError::QueueDoesNotExist)
}

pub async fn list(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let prefix = input.string("QueueNamePrefix")?.unwrap_or("").to_owned();
    let groups = state.broker.ask(QueueNameGroups { vhost: Some(caller.vhost.clone()) }).await?;
    let permissions = permissions(state, caller, &caller.vhost);
    let names: Vec<String> = groups
        .into_iter()
        .flat_map(|g| g.queues.into_iter().map(|(name, _)| name.as_str().into_owned()))
        .filter(|name| name.starts_with(&prefix))
        .filter(|name| {
            [Access::Configure, Access::Write, Access::Read]
                .into_iter()
                .any(|a| permissions.allows(a, Resource::Queue, name))
        })
        .collect();
    url_page(caller, &caller.vhost, names, input, "QueueUrls")
}

/// The queues whose RedrivePolicy names this one, as `queueUrls` (SQS's own lower case), paged
/// by name like ListQueues.
pub async fn dead_letter_sources(
    state: &SqsState,
    caller: &Caller,
    input: &Input<'_>,
) -> Result<Value, SqsError> {
    let queue = queue_named(caller, input)?;
    existing(state, caller, &queue).await?;
    let sources = SqsDeadLetterSources { vhost: queue.vhost.clone(), queue: queue.name.clone() };
    let names = state.broker.ask(sources).await?.map_err(|_| SqsError::QueueDoesNotExist)?;
    url_page(caller, &queue.vhost, names, input, "queueUrls")
}

/// The URLs of `names` under `field`, in name order, paged by `MaxResults` and `NextToken` (the
/// last name of the page before); without `MaxResults`, up to 1,000 and no token, as SQS.
fn url_page(
    caller: &Caller,
    vhost: &str,
    mut names: Vec<String>,
    input: &Input<'_>,
    field: &str,
) -> Result<Value, SqsError> {
    let max = input.integer("MaxResults", 1..=LIST_MAX as i64)?;
    let after = input.string("NextToken")?;
    names.retain(|n| after.is_none_or(|after| n.as_str() > after));
    names.sort();
    let limit = max.map_or(LIST_MAX, |m| m as usize);
    let more = names.len() > limit && max.is_some();
    names.truncate(limit);
    let urls: Vec<String> = names.iter().map(|n| url_of(caller, vhost, n)).collect();
    let mut out = Map::new();
    out.insert(field.into(), json!(urls));
    if more {
        out.insert("NextToken".into(), json!(names.last()));
    }
    Ok(Value::Object(out))
}

/// SetQueueAttributes: the attributes' arguments changed in place (configure permission, as
/// any change to a queue), for what reads them from now on.
pub async fn set_attributes(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_named(caller, input)?;
    require(state, caller, Access::Configure, &queue)?;
    let attributes = input.string_map("Attributes")?;
    let fifo = existing(state, caller, &queue).await?.settings.sqs.fifo;
    let mut changes: Vec<ArgumentChange> = Vec::new();
    for (name, value) in &attributes {
        changes.extend(attribute_arguments(caller, &queue.vhost, name, value, fifo)?);
    }
    if !changes.is_empty() {
        let now_s = (state.clock)() / 1000;
        changes.push((MODIFIED_ARG.to_owned(), Some(FieldValue::I64(now_s as i64))));
    }
    change_arguments(state, &queue, changes).await
}

/// Changes some of `queue`'s arguments in place (`Broker::sqs_set_arguments`).
pub(crate) async fn change_arguments(
    state: &SqsState,
    queue: &QueueRef,
    changes: Vec<ArgumentChange>,
) -> Result<Value, SqsError> {
    let change = ChangeSqsArguments { vhost: queue.vhost.clone(), queue: queue.name.clone(), changes };
    let set = state.broker.request(change).await?;
    // A changed Policy applies from the next request (policy.rs caches what it read).
    state.policies.forget(queue);
    set.map_err(|e| crate::messages::gateway_error(e, ""))?;
    Ok(json!({}))
}

/// `queue`'s arguments, in one broker job; `QueueDoesNotExist` when there is no such queue.
pub async fn arguments_of(state: &SqsState, queue: &QueueRef) -> Result<FieldTable, SqsError> {
    let named = QueueArguments { vhost: queue.vhost.clone(), name: queue.name.clone() };
    state.broker.ask(named).await?.ok_or(SqsError::QueueDoesNotExist)
}

/// A queue's tags, from its argument.
fn tags_of(details: &hourglass_broker::admin::QueueDetails) -> std::collections::BTreeMap<String, String> {
    let Some(FieldValue::Table(tags)) = details.arguments.get(TAGS_ARG) else { return Default::default() };
    tags.iter()
        .filter_map(|(key, value)| match value {
            FieldValue::LongStr(v) => Some((key.as_str().into_owned(), v.as_str().into_owned())),
            _ => None,
        })
        .collect()
}

/// `tags` as the argument's table, within AWS's limits.
fn tags_table(tags: std::collections::BTreeMap<String, String>) -> Result<FieldValue, SqsError> {
    if tags.len() > TAGS_MAX {
        return Err(SqsError::InvalidParameterValue(format!(
            "Too many tags: a queue has at most {TAGS_MAX}."
        )));
    }
    for (key, value) in &tags {
        let reserved = key.to_ascii_lowercase().starts_with("aws:");
        if key.is_empty() || key.len() > TAG_KEY_LEN_MAX || value.len() > TAG_VALUE_LEN_MAX || reserved {
            return Err(SqsError::InvalidParameterValue(format!(
                "Tag '{key}' is invalid: keys are 1 to {TAG_KEY_LEN_MAX} characters and do not start with aws:, values up to {TAG_VALUE_LEN_MAX}."
            )));
        }
    }
    let entries = tags.into_iter().map(|(k, v)| (k, FieldValue::LongStr(LongStr::from(v))));
    Ok(FieldValue::Table(FieldTable::from_entries(entries)))
}

pub async fn list_tags(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_named(caller, input)?;
    let tags = tags_of(&existing(state, caller, &queue).await?);
    if tags.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({"Tags": tags}))
}

/// TagQueue and UntagQueue: the tags changed (configure permission, as any change to a queue).
pub async fn tag(
    state: &SqsState,
    caller: &Caller,
    input: &Input<'_>,
    untag: bool,
) -> Result<Value, SqsError> {
    let queue = queue_named(caller, input)?;
    require(state, caller, Access::Configure, &queue)?;
    let mut tags = tags_of(&existing(state, caller, &queue).await?);
    if untag {
        let keys = input.strings("TagKeys")?;
        // AWS refuses an empty list (moto in AWS's words).
        if keys.is_empty() {
            return Err(SqsError::InvalidParameterValue(
                "Tag keys must be between 1 and 128 characters in length.".into(),
            ));
        }
        for key in keys {
            tags.remove(&key);
        }
    } else {
        let added = input.string_map("Tags")?;
        if added.is_empty() {
            return Err(SqsError::MissingParameter("Tags"));
        }
        tags.extend(added);
    }
    let change = if tags.is_empty() { None } else { Some(tags_table(tags)?) };
    change_arguments(state, &queue, vec![(TAGS_ARG.to_owned(), change)]).await
}

pub async fn delete(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_named(caller, input)?;
    // AMQP's queue.delete of a missing queue is no error; SQS's DeleteQueue is.
    existing(state, caller, &queue).await?;
    let delete = QueueDelete { queue: short(&queue.name)?, ..Default::default() };
    let who = as_caller(state, caller, &queue)?;
    state.broker.request(CallMethod { who, method: delete.into() }).await?.map_err(refusal)?;
    state.policies.forget(&queue);
    Ok(json!({}))
}

pub async fn purge(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_named(caller, input)?;
    let name = short(&queue.name)?;
    // What SQS received and has not deleted goes too, as on AWS.
    let who = as_caller(state, caller, &queue)?;
    state.broker.request(PurgeSqsQueue { who, queue: name }).await?.map_err(refusal)?;
    Ok(json!({}))
}

/// The caller as the broker's requests act: with the caller's permissions, in the queue's vhost.
fn as_caller(state: &SqsState, caller: &Caller, queue: &QueueRef) -> Result<AsUser, SqsError> {
    require_vhost(state, &queue.vhost)?;
    Ok(AsUser {
        user: caller.user.clone(),
        vhost: queue.vhost.clone(),
        permissions: permissions(state, caller, &queue.vhost),
    })
}

/// A method the broker refused on the caller's admin channel, as SQS answers it.
fn refusal(error: AmqpError) -> SqsError {
    if error.reply_code == 406 {
        SqsError::InvalidParameterValue(error.reply_text)
    } else {
        from_amqp(error)
    }
}

pub async fn attributes(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queue_named(caller, input)?;
    let wanted = input.strings("AttributeNames")?;
    let details = existing(state, caller, &queue).await?;
    let all = queue_attributes(caller, &queue, &details);
    let chosen: Map<String, Value> = if wanted.iter().any(|w| w == "All") {
        all
    } else {
        for name in &wanted {
            if !all.contains_key(name) && !KNOWN_UNSHOWN.contains(&name.as_str()) {
                return Err(SqsError::InvalidAttributeName(name.clone()));
            }
        }
        all.into_iter().filter(|(k, _)| wanted.contains(k)).collect()
    };
    if chosen.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({"Attributes": chosen}))
}

/// Attribute names SQS knows that a queue here may not show (FIFO, encryption, policies; the
/// timestamps of a queue made over AMQP).
const KNOWN_UNSHOWN: &[&str] = &[
    "Policy",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "SqsManagedSseEnabled",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
];

/// A queue's SQS attributes, from its arguments and counts. Each value a string, as SQS sends.
fn queue_attributes(
    caller: &Caller,
    queue: &QueueRef,
    details: &hourglass_broker::admin::QueueDetails,
) -> Map<String, Value> {
    let arg = |name: &str| details.arguments.get(name).and_then(|v| v.as_i64());
    let stats = &details.stats;
    let mut out = Map::new();
    let mut put = |name: &str, value: String| {
        out.insert(name.to_owned(), Value::String(value));
    };
    put("QueueArn", arn_of(caller, &queue.vhost, &queue.name));
    put("ApproximateNumberOfMessages", stats.messages_ready.to_string());
    put("ApproximateNumberOfMessagesNotVisible", stats.messages_unacked.to_string());
    put("ApproximateNumberOfMessagesDelayed", stats.messages_delayed.to_string());
    // The visibility timeout and delay as they run: a policy's, capped by an operator policy's
    // (the receive and send paths read the same settings); 0 is the queue's own marker.
    let settings = &details.settings;
    let visibility_ms = settings.sqs.zero_visibility.then_some(0).or(settings.visibility_timeout_ms);
    put(
        "VisibilityTimeout",
        (visibility_ms.unwrap_or(VISIBILITY_TIMEOUT_DEFAULT_S.unsigned_abs() * 1000) / 1000).to_string(),
    );
    put("DelaySeconds", (settings.delivery_delay_ms.unwrap_or(0) / 1000).to_string());
    // Its TTL as it runs (a policy's too); a queue whose messages never expire (declared over
    // AMQP without one) shows AWS's longest period (issue 40, item 17).
    let retention_s = settings.message_ttl_ms.map_or(*RETENTION_RANGE_S.end() as u64, |ttl| ttl / 1000);
    put("MessageRetentionPeriod", retention_s.to_string());
    put("MaximumMessageSize", settings.sqs.message_size_max().to_string());
    put("ReceiveMessageWaitTimeSeconds", settings.sqs.receive_wait_s.unwrap_or(0).to_string());
    // Dead-lettering to a queue through the default exchange after a delivery limit, as it runs
    // (policies applied): what a RedrivePolicy is. One to a named exchange is none.
    let redrive =
        (&settings.dead_letter_exchange, &settings.dead_letter_routing_key, settings.delivery_limit);
    if let (Some(exchange), Some(target), Some(limit)) = redrive {
        if exchange.is_empty() {
            let policy = json!({
                "deadLetterTargetArn": arn_of(caller, &queue.vhost, &target.as_str()),
                "maxReceiveCount": limit + 1,
            });
            put("RedrivePolicy", policy.to_string());
        }
    }
    if let Some(created) = arg(CREATED_ARG) {
        put("CreatedTimestamp", created.to_string());
        put("LastModifiedTimestamp", arg(MODIFIED_ARG).unwrap_or(created).to_string());
    }
    for (attribute, key) in STORED_ATTRIBUTES {
        if let Some(FieldValue::LongStr(value)) = details.arguments.get(key) {
            put(attribute, value.as_str().into_owned());
        }
    }
    if details.arguments.get("x-sqs-kms-master-key-id").is_some()
        && details.arguments.get("x-sqs-kms-data-key-reuse-period-seconds").is_none()
    {
        // AWS shows the default reuse period of a queue with a KMS key.
        put("KmsDataKeyReusePeriodSeconds", "300".to_owned());
    }
    fifo::queue_attributes(&settings.sqs, &details.arguments, &mut out);
    out
}
