//! AddPermission and RemovePermission (issue 40, item 15): a labelled `Allow` statement added to,
//! or removed from, a queue's `Policy`, as AWS writes it. Like every `Allow` here it grants
//! nothing (`policy.rs`), but tools and SDK helpers that call these operations, and read the
//! policy back, work as on AWS.

use serde_json::{json, Value};

use hourglass_broker::Access;
use hourglass_wire::{FieldValue, LongStr};

use crate::error::SqsError;
use crate::policy::POLICY_ARG;
use crate::queues::{self, QueueRef};
use crate::request::Input;
use crate::{Caller, SqsState};

/// The actions AddPermission may name (AWS: "only the queue owner" may do the others).
const GRANTABLE: [&str; 9] = [
    "*",
    "ChangeMessageVisibility",
    "DeleteMessage",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "PurgeQueue",
    "ReceiveMessage",
    "SendMessage",
];
/// Actions one AddPermission names at most.
const ACTIONS_MAX: usize = 7;
/// `Label`: 1 to 80 letters, digits, `-` and `_`.
const LABEL_MAX: usize = 80;

pub async fn add(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queues::queue_named(caller, input)?;
    queues::require(state, caller, Access::Configure, &queue)?;
    let label = checked_label(input.required("Label")?)?;
    let accounts = input.strings("AWSAccountIds")?;
    let actions = input.strings("Actions")?;
    if actions.is_empty() {
        return Err(SqsError::MissingParameter("Actions"));
    }
    if accounts.is_empty() {
        return Err(SqsError::InvalidParameterValue(
            "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.".into(),
        ));
    }
    if actions.len() > ACTIONS_MAX {
        return Err(SqsError::OverLimit(format!(
            "{} Actions were found, maximum allowed is {ACTIONS_MAX}.",
            actions.len()
        )));
    }
    if let Some(action) = actions.iter().find(|a| !GRANTABLE.contains(&a.as_str())) {
        return Err(SqsError::InvalidParameterValue(format!(
            "Value SQS:{action} for parameter ActionName is invalid. Reason: Only the queue owner is allowed to invoke this action."
        )));
    }
    let mut policy = current(state, &queue).await?;
    let statements = statements_of(&mut policy)?;
    if statements.iter().any(|s| s.get("Sid").and_then(Value::as_str) == Some(label)) {
        return Err(SqsError::InvalidParameterValue(format!(
            "Value {label} for parameter Label is invalid. Reason: Already exists."
        )));
    }
    let one_or_many = |all: Vec<String>| if all.len() == 1 { json!(all[0]) } else { json!(all) };
    statements.push(json!({
        "Sid": label,
        "Effect": "Allow",
        "Principal": {"AWS": one_or_many(accounts.iter().map(|a| format!("arn:aws:iam::{a}:root")).collect())},
        "Action": one_or_many(actions.iter().map(|a| format!("SQS:{a}")).collect()),
        "Resource": queues::arn_of(caller, &queue.vhost, &queue.name),
    }));
    store(state, &queue, Some(policy)).await
}

pub async fn remove(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let queue = queues::queue_named(caller, input)?;
    queues::require(state, caller, Access::Configure, &queue)?;
    let label = input.required("Label")?;
    let mut policy = current(state, &queue).await?;
    let statements = statements_of(&mut policy)?;
    let before = statements.len();
    statements.retain(|s| s.get("Sid").and_then(Value::as_str) != Some(label));
    if statements.len() == before {
        return Err(SqsError::InvalidParameterValue(format!(
            "Value {label} for parameter Label is invalid. Reason: can't find label on existing policy."
        )));
    }
    // The last statement gone, so is the policy (GetQueueAttributes shows none).
    let left = (!statements.is_empty()).then_some(policy);
    store(state, &queue, left).await
}

fn checked_label(label: &str) -> Result<&str, SqsError> {
    let valid = !label.is_empty()
        && label.len() <= LABEL_MAX
        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(label)
    } else {
        Err(SqsError::InvalidParameterValue(format!(
            "Value {label} for parameter Label is invalid. Reason: Must be 1 to {LABEL_MAX} letters, digits, hyphens or underscores."
        )))
    }
}

/// The queue's policy as a JSON document, or AWS's empty default one.
async fn current(state: &SqsState, queue: &QueueRef) -> Result<Value, SqsError> {
    let arguments = queues::arguments_of(state, queue).await?;
    let stored = match arguments.get(POLICY_ARG) {
        Some(FieldValue::LongStr(text)) => serde_json::from_str::<Value>(&text.as_str()).ok(),
        _ => None,
    };
    Ok(stored.filter(Value::is_object).unwrap_or_else(|| json!({"Version": "2012-10-17", "Statement": []})))
}

/// The policy's statements as a list (a single statement object becomes a list of one).
fn statements_of(policy: &mut Value) -> Result<&mut Vec<Value>, SqsError> {
    let unreadable = || SqsError::InvalidParameterValue("The queue's Policy is not a JSON object.".into());
    let statements =
        policy.as_object_mut().ok_or_else(unreadable)?.entry("Statement").or_insert_with(|| json!([]));
    if !statements.is_array() {
        *statements = Value::Array(vec![statements.take()]);
    }
    statements.as_array_mut().ok_or_else(unreadable)
}

async fn store(state: &SqsState, queue: &QueueRef, policy: Option<Value>) -> Result<Value, SqsError> {
    let text = policy.map(|p| p.to_string());
    if text.as_ref().is_some_and(|t| t.len() > queues::POLICY_MAX_BYTES) {
        return Err(SqsError::OverLimit(format!(
            "The queue's Policy would be over {} bytes.",
            queues::POLICY_MAX_BYTES
        )));
    }
    let value = text.map(|t| FieldValue::LongStr(LongStr::from(t)));
    queues::change_arguments(state, queue, vec![(POLICY_ARG.to_owned(), value)]).await
}
