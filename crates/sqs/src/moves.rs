//! Message-move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask): a
//! dead-letter queue's messages redriven to the queues they came from, or to a destination, at
//! a bounded rate (issue 26). Each task is a tokio task that asks the broker for one step every
//! [`TICK`] (`Broker::sqs_move`: each message enters its new queue before it leaves the old).
//! Tasks live in memory: a restart ends them (the messages not yet moved stay in the source).

use std::sync::Mutex;
use std::time::Duration;

use hourglass_broker::admin::{MoveStep, MoveTarget};
use hourglass_broker::{Access, Resource};
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
        let finished = match step(&state, &task, per_tick).await {
            Ok(step) => {
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
            return;
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
    let (vhost, name, destination) = (source.vhost.clone(), source.name.clone(), task.destination.clone());
    state
        .broker
        .run(move |b, now| {
            let target = match &destination {
                Some(d) => MoveTarget::Queue { vhost: &d.vhost, name: &d.name },
                None => MoveTarget::Origin,
            };
            let may_write = |queue_vhost: &str, queue: &str| {
                queue_vhost == target_vhost && permissions.allows(Access::Write, Resource::Queue, queue)
            };
            b.sqs_move(&vhost, &name, target, &may_write, max, now)
        })
        .await?
        .map_err(|error| SqsError::InvalidParameterValue(error.to_string()))
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
