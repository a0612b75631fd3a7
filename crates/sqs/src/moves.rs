//! Message-move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask): a
//! dead-letter queue's messages redriven to the queues they came from, or to a destination, at
//! a bounded rate (issue 26). Each task is a tokio task that asks the broker for one step every
//! [`TICK`] (`Broker::sqs_move`: each message enters its new queue before it leaves the old).
//! Tasks live in memory: a restart ends them (the messages not yet moved stay in the source).

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::error::SqsError;
use crate::queues::{self, QueueRef};
use crate::request::Input;
use crate::{Caller, SqsState};

/// How often a running task moves its next messages.
const TICK: Duration = Duration::from_millis(100);
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
}

#[derive(Clone, Debug)]
struct Task {
    handle: String,
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
}

pub async fn start(state: &SqsState, caller: &Caller, input: &Input<'_>) -> Result<Value, SqsError> {
    let source_arn = input.required("SourceArn")?.to_owned();
    let source = queues::queue_of_arn(&source_arn)?;
    let destination_arn = input.string("DestinationArn")?.map(str::to_owned);
    let destination = destination_arn.as_deref().map(queues::queue_of_arn).transpose()?;
    let rate = input.integer("MaxNumberOfMessagesPerSecond", 1..=RATE_MAX)?;
    queues::require(state, caller, hourglass_broker::Access::Read, &source)?;
    // Both queues must exist (no arguments are needed from them).
    queues::integer_arguments(state, &source, []).await?;
    if let Some(destination) = &destination {
        queues::integer_arguments(state, destination, []).await?;
        queues::require(state, caller, hourglass_broker::Access::Write, destination)?;
    }
    let (vhost, name) = (source.vhost.clone(), source.name.clone());
    let to_move = state
        .broker
        .run(move |b, _| b.queue_stats(&vhost, &name).map(|s| s.messages_ready as u64))
        .await?
        .ok_or(SqsError::QueueDoesNotExist)?;
    let handle = crate::messages::random_uuid();
    {
        let mut tasks = state.moves.lock();
        if tasks.iter().any(|t| t.source == source && t.status == Status::Running) {
            return Err(SqsError::UnsupportedOperation(
                "A message movement task is already running on this source queue.".into(),
            ));
        }
        tasks.insert(
            0,
            Task {
                handle: handle.clone(),
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
            },
        );
        let finished: Vec<usize> =
            tasks.iter().enumerate().filter(|(_, t)| t.status != Status::Running).map(|(i, _)| i).collect();
        for i in finished.into_iter().skip(FINISHED_KEPT).rev() {
            tasks.remove(i);
        }
    }
    tokio::spawn(run(state.clone(), handle.clone()));
    Ok(json!({"TaskHandle": handle}))
}

/// Moves a task's messages until they are all moved, it is cancelled, or it cannot go on.
async fn run(state: SqsState, handle: String) {
    let mut tick = tokio::time::interval(TICK);
    loop {
        tick.tick().await;
        let Some(task) = state.moves.get(&handle) else { return };
        if task.status == Status::Cancelling {
            state.moves.update(&handle, |t| t.status = Status::Cancelled);
            return;
        }
        let per_tick = (task.rate.unwrap_or(RATE_MAX) as usize).div_ceil(10).max(1);
        let (vhost, name) = (task.source.vhost.clone(), task.source.name.clone());
        let destination = task.destination.as_ref().map(|d| d.name.clone());
        let step = state
            .broker
            .run(move |b, now| b.sqs_move(&vhost, &name, destination.as_deref(), per_tick, now))
            .await;
        let finished = match step {
            Ok(Ok(step)) => {
                state.moves.update(&handle, |t| t.moved += step.moved as u64);
                if step.stuck {
                    Some((
                        Status::Failed,
                        Some(
                            "A message has no source queue to go back to: give a DestinationArn.".to_owned(),
                        ),
                    ))
                } else if step.left == 0 || state.moves.get(&handle).is_some_and(|t| t.moved >= t.to_move) {
                    Some((Status::Completed, None))
                } else {
                    None
                }
            }
            Ok(Err(error)) => Some((Status::Failed, Some(error.to_string()))),
            Err(error) => Some((Status::Failed, Some(error.to_string()))),
        };
        if let Some((status, failure)) = finished {
            state.moves.update(&handle, |t| {
                // A cancel that came during the last step still ends the task as cancelled.
                t.status = if t.status == Status::Cancelling { Status::Cancelled } else { status };
                t.failure = failure;
            });
            return;
        }
    }
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
