//! Message-move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask): a
//! dead-letter queue's messages redriven to the queues they came from, or to a destination, at
//! a bounded rate (issue 26). Each task is a tokio task that asks the broker for one step every
//! [`TICK`] (`Broker::sqs_move`: each message enters its new queue before it leaves the old),
//! at most `MaxNumberOfMessagesPerSecond` a second.
//!
//! A task outlives a restart and a failover (issue 40, item 22): the source queue keeps its
//! latest task in the argument [`TASK_ARG`] (a durable definition, replicated in a cluster),
//! written when it starts, every [`PERSIST_EVERY`] while it runs and when it ends; at start the
//! endpoint takes up every task written as running ([`resume`]). Its count of messages moved
//! may then miss the moves of the last seconds before a crash (SQS calls it approximate); no
//! message is moved twice or lost, as each step's moves are the broker's.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hourglass_broker::admin::MoveStep;
use hourglass_broker::requests::{MoveMessages, QueuesWithArgument, ReadyCount};
use hourglass_broker::{Access, Resource};
use hourglass_wire::FieldValue;
use serde_json::{json, Map, Value};

use crate::error::SqsError;
use crate::queues::{self, QueueRef};
use crate::request::Input;
use crate::{Caller, SqsState};

/// How often a running task moves its next messages.
const TICK: Duration = Duration::from_millis(100);
const TICKS_PER_SECOND: u64 = 10;
/// The source queue's argument holding its latest task (JSON).
pub const TASK_ARG: &str = hourglass_broker::admin::SQS_MOVE_TASK_ARG;
/// How often a running task writes how far it got.
const PERSIST_EVERY: Duration = Duration::from_secs(2);
/// AWS's range for `MaxNumberOfMessagesPerSecond`, and the rate without one.
const RATE_MAX: i64 = 500;
/// Finished tasks remembered for ListMessageMoveTasks, all sources together.
const FINISHED_KEPT: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Running,
    Completed,
    Cancelling,
    Cancelled,
    Failed,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Running => "RUNNING",
            Status::Completed => "COMPLETED",
            Status::Cancelling => "CANCELLING",
            Status::Cancelled => "CANCELLED",
            Status::Failed => "FAILED",
        }
    }

    fn of_name(name: &str) -> Option<Status> {
        [Status::Running, Status::Completed, Status::Cancelling, Status::Cancelled, Status::Failed]
            .into_iter()
            .find(|status| status.name() == name)
    }
}

#[derive(Clone, Debug)]
struct Task {
    handle: String,
    /// The user who started it: every step moves with this user's permissions as they are then.
    user: String,
    source: QueueRef,
    source_arn: String,
    destination: Option<QueueRef>,
    destination_arn: Option<String>,
    rate: Option<i64>,
    status: Status,
    moved: u64,
    to_move: u64,
    started_ms: u64,
    failure: Option<String>,
}

impl Task {
    /// The task as its source queue keeps it ([`TASK_ARG`]).
    fn stored(&self) -> String {
        json!({
            "handle": self.handle,
            "user": self.user,
            "source_arn": self.source_arn,
            "destination_arn": self.destination_arn,
            "rate": self.rate,
            "status": self.status.name(),
            "moved": self.moved,
            "to_move": self.to_move,
            "started_ms": self.started_ms,
            "failure": self.failure,
        })
        .to_string()
    }

    /// A task its source queue kept; `None` for what does not read as one.
    fn from_stored(source: QueueRef, text: &str) -> Option<Task> {
        let stored: Value = serde_json::from_str(text).ok()?;
        let text_of = |key: &str| stored.get(key).and_then(Value::as_str).map(str::to_owned);
        let destination_arn = text_of("destination_arn");
        let destination = match &destination_arn {
            Some(arn) => Some(queues::queue_of_arn(arn).ok()?),
            None => None,
        };
        Some(Task {
            handle: text_of("handle")?,
            user: text_of("user")?,
            source,
            source_arn: text_of("source_arn")?,
            destination,
            destination_arn,
            rate: stored.get("rate").and_then(Value::as_i64).filter(|rate| (1..=RATE_MAX).contains(rate)),
            status: Status::of_name(&text_of("status")?)?,
            moved: stored.get("moved").and_then(Value::as_u64)?,
            to_move: stored.get("to_move").and_then(Value::as_u64)?,
            started_ms: stored.get("started_ms").and_then(Value::as_u64)?,
            failure: text_of("failure"),
        })
    }
}

/// Every task of the endpoint, newest first.
#[derive(Debug, Default)]
pub struct MoveTasks {
    tasks: Mutex<Vec<Task>>,
}

impl MoveTasks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Task>> {
        // Plain records: a panic elsewhere cannot leave them half-written.
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, handle: &str, change: impl FnOnce(&mut Task)) {
        if let Some(task) = self.lock().iter_mut().find(|t| t.handle == handle) {
            change(task);
        }
    }

    fn get(&self, handle: &str) -> Option<Task> {
        self.lock().iter().find(|t| t.handle == handle).cloned()
    }

    /// Adds `task`, newest first, keeping at most [`FINISHED_KEPT`] finished ones.
    fn add(&self, task: Task) {
        let mut tasks = self.lock();
        let at = tasks.iter().position(|t| t.started_ms <= task.started_ms).unwrap_or(tasks.len());
        tasks.insert(at, task);
        let finished: Vec<usize> =
            tasks.iter().enumerate().filter(|(_, t)| t.status != Status::Running).map(|(i, _)| i).collect();
        for i in finished.into_iter().skip(FINISHED_KEPT).rev() {
            tasks.remove(i);
        }
    }
}

/// Takes up the tasks the endpoint's queues kept (at start, after a restart or a failover):
/// lists them all, and spawns a run for each written as running.
pub async fn resume(state: SqsState) {
    let found = match state.broker.ask(QueuesWithArgument { key: TASK_ARG.to_owned() }).await {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(%error, "message-move tasks not taken up: the broker did not answer");
            return;
        }
    };
    for (vhost, name, value) in found {
        let source = QueueRef { vhost, name };
        let task = match &value {
            FieldValue::LongStr(text) => Task::from_stored(source.clone(), &text.as_str()),
            _ => None,
        };
        let Some(task) = task else {
            tracing::warn!(vhost = %source.vhost, queue = %source.name, "a kept message-move task does not read; left alone");
            continue;
        };
        let goes_on = matches!(task.status, Status::Running | Status::Cancelling);
        let handle = task.handle.clone();
        if goes_on {
            tracing::info!(vhost = %source.vhost, queue = %source.name, moved = task.moved, "message-move task taken up");
        }
        state.moves.add(task);
        if goes_on {
            tokio::spawn(run(state.clone(), handle));
        }
    }
}

/// Writes `task` into its source queue's [`TASK_ARG`]; a queue gone since is no error (its task
/// fails at its next step).
async fn persist(state: &SqsState, task: &Task) {
    let change = vec![(TASK_ARG.to_owned(), Some(FieldValue::LongStr(task.stored().into())))];
    if let Err(error) = queues::change_arguments(state, &task.source, change).await {
        tracing::debug!(%error, handle = %task.handle, "message-move task not written");
    }
}

/// How many messages a task moving at `rate` a second may have moved `ticks` ticks after it
/// started (or was taken up): one at once, then the rate.
fn allowed_after(ticks: u64, rate: u64) -> u64 {
    1 + ticks * rate / TICKS_PER_SECOND
}

pub async fn start(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let source_arn = input.required("SourceArn")?.to_owned();
    let source = queues::queue_of_arn(&source_arn)?;
    let destination_arn = input.string("DestinationArn")?.map(str::to_owned);
    let destination = destination_arn.as_deref().map(queues::queue_of_arn).transpose()?;
    let rate = input.integer("MaxNumberOfMessagesPerSecond", 1..=RATE_MAX)?;
    queues::require(state, caller, hourglass_broker::Access::Read, &source)?;
    // Both queues must exist (no arguments are needed from them).
    queues::arguments_of(state, &source).await?;
    if let Some(destination) = &destination {
        queues::arguments_of(state, destination).await?;
        queues::require(state, caller, hourglass_broker::Access::Write, destination)?;
    }
    let ready = ReadyCount { vhost: source.vhost.clone(), name: source.name.clone() };
    let to_move = state.broker.ask(ready).await?.ok_or(SqsError::QueueDoesNotExist)?;
    let handle = crate::messages::random_uuid();
    let task = Task {
        handle: handle.clone(),
        user: caller.user.clone(),
        source,
        source_arn,
        destination,
        destination_arn,
        rate,
        status: Status::Running,
        moved: 0,
        to_move,
        started_ms: (state.clock)(),
        failure: None,
    };
    if state.moves.lock().iter().any(|t| t.source == task.source && t.status == Status::Running) {
        return Err(SqsError::UnsupportedOperation(
            "A message movement task is already running on this source queue.".into(),
        ));
    }
    state.moves.add(task.clone());
    persist(state, &task).await;
    tokio::spawn(run(state.clone(), handle.clone()));
    Ok(json!({"TaskHandle": handle}))
}

/// Moves a task's messages until they are all moved, it is cancelled, it cannot go on, or the
/// endpoint stops (then it stays written as running, and the next start takes it up).
async fn run(state: SqsState, handle: String) {
    let mut tick = tokio::time::interval(TICK);
    let mut stop = state.stop.clone();
    let (mut ticks, mut moved_here) = (0u64, 0u64);
    let mut written = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let Some(task) = state.moves.get(&handle) else { return };
        if task.status == Status::Cancelling {
            state.moves.update(&handle, |t| t.status = Status::Cancelled);
            if let Some(task) = state.moves.get(&handle) {
                persist(&state, &task).await;
            }
            return;
        }
        let rate = task.rate.unwrap_or(RATE_MAX) as u64;
        let due = allowed_after(ticks, rate).saturating_sub(moved_here).min(rate);
        ticks += 1;
        if due == 0 {
            continue;
        }
        let finished = match step(&state, &task, due as usize).await {
            Ok(step) => {
                moved_here += step.moved as u64;
                state.moves.update(&handle, |t| t.moved += step.moved as u64);
                if let Some(stopped) = step.stopped {
                    Some((Status::Failed, Some(stopped.to_string())))
                } else if step.left == 0 || state.moves.get(&handle).is_some_and(|t| t.moved >= t.to_move) {
                    Some((Status::Completed, None))
                } else {
                    None
                }
            }
            Err(error) => Some((Status::Failed, Some(error.to_string()))),
        };
        if let Some((status, failure)) = finished {
            state.moves.update(&handle, |t| {
                // A cancel that came during the last step still ends the task as cancelled.
                t.status = if t.status == Status::Cancelling { Status::Cancelled } else { status };
                t.failure = failure;
            });
            if let Some(task) = state.moves.get(&handle) {
                persist(&state, &task).await;
            }
            return;
        }
        if written.elapsed() >= PERSIST_EVERY {
            written = Instant::now();
            if let Some(task) = state.moves.get(&handle) {
                persist(&state, &task).await;
            }
        }
    }
}

/// One step of `task`: up to `max` messages moved, with its user's permissions as they are now
/// (read on the source; write on each message's queue, checked by the broker per message).
async fn step(state: &SqsState, task: &Task, max: usize) -> Result<MoveStep, SqsError> {
    let source = &task.source;
    if !state.users.compiled_permissions(&source.vhost, &task.user).allows(
        Access::Read,
        Resource::Queue,
        &source.name,
    ) {
        return Err(SqsError::AccessDenied(format!("queue '{}' in vhost '{}'", source.name, source.vhost)));
    }
    let target_vhost = task.destination.as_ref().map_or(&source.vhost, |d| &d.vhost).clone();
    let permissions = state.users.compiled_permissions(&target_vhost, &task.user);
    let step = MoveMessages {
        vhost: source.vhost.clone(),
        source: source.name.clone(),
        destination: task.destination.as_ref().map(|d| (d.vhost.clone(), d.name.clone())),
        user_vhost: target_vhost,
        permissions,
        max,
    };
    state.broker.request(step).await?.map_err(|error| SqsError::InvalidParameterValue(error.to_string()))
}

pub async fn list(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let source_arn = input.required("SourceArn")?;
    let source = queues::queue_of_arn(source_arn)?;
    queues::require(state, caller, hourglass_broker::Access::Read, &source)?;
    let max = input.integer("MaxResults", 1..=10)?.unwrap_or(1) as usize;
    let tasks: Vec<Task> =
        state.moves.lock().iter().filter(|t| t.source == source).take(max).cloned().collect();
    let results: Vec<Value> = tasks.iter().map(task_json).collect();
    Ok(json!({"Results": results}))
}

fn task_json(task: &Task) -> Value {
    let mut out = Map::new();
    if task.status == Status::Running {
        out.insert("TaskHandle".into(), json!(task.handle));
    }
    out.insert("Status".into(), json!(task.status.name()));
    out.insert("SourceArn".into(), json!(task.source_arn));
    if let Some(arn) = &task.destination_arn {
        out.insert("DestinationArn".into(), json!(arn));
    }
    if let Some(rate) = task.rate {
        out.insert("MaxNumberOfMessagesPerSecond".into(), json!(rate));
    }
    out.insert("ApproximateNumberOfMessagesMoved".into(), json!(task.moved));
    out.insert("ApproximateNumberOfMessagesToMove".into(), json!(task.to_move));
    if let Some(failure) = &task.failure {
        out.insert("FailureReason".into(), json!(failure));
    }
    out.insert("StartedTimestamp".into(), json!(task.started_ms));
    Value::Object(out)
}

pub async fn cancel(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let handle = input.required("TaskHandle")?;
    let task =
        state.moves.get(handle).filter(|t| t.status == Status::Running).ok_or_else(|| {
            SqsError::ResourceNotFound("The task handle does not name a running task.".into())
        })?;
    queues::require(state, caller, hourglass_broker::Access::Read, &task.source)?;
    state.moves.update(handle, |t| t.status = Status::Cancelling);
    Ok(json!({"ApproximateNumberOfMessagesMoved": task.moved}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `MaxNumberOfMessagesPerSecond` holds below 10 a second too: before, a task moved at
    /// least one message per 100 ms tick, 10 a second at a rate of 1.
    #[test]
    fn a_task_moves_at_its_rate_after_the_first_message() {
        assert_eq!(allowed_after(0, 1), 1);
        assert_eq!(allowed_after(9, 1), 1, "the second message waits a second");
        assert_eq!(allowed_after(10, 1), 2);
        assert_eq!(allowed_after(10, 500), 501);
        assert_eq!(allowed_after(1, 500), 51);
    }

    #[test]
    fn a_kept_task_reads_back_as_it_was_written() {
        let source = QueueRef { vhost: "/".into(), name: "dlq".into() };
        let task = Task {
            handle: "h".into(),
            user: "worker".into(),
            source: source.clone(),
            source_arn: "arn:aws:sqs:us-east-1:000000000000:dlq".into(),
            destination: None,
            destination_arn: None,
            rate: Some(7),
            status: Status::Running,
            moved: 3,
            to_move: 10,
            started_ms: 1_700_000_000_000,
            failure: None,
        };
        let back = Task::from_stored(source.clone(), &task.stored()).unwrap();
        assert_eq!(back.stored(), task.stored());
        assert!(Task::from_stored(source, "{\"handle\": 1}").is_none(), "what does not read is left alone");
    }
}
