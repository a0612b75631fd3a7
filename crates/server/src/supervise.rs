//! Supervision of the long-lived parts (issue #21): if the broker task, the store thread or the
//! cluster coordinator dies, the process exits non-zero with one line naming which — it never
//! listens on (or, in a cluster, keeps its lease) while serving nobody.
//!
//! **Test only:** `HOURGLASS_TEST_INJECT_DEATH=PART:SECONDS` (PART one of `broker-task`,
//! `store-thread`, `coordinator`) makes that part panic SECONDS after it starts, so the tests can
//! prove the above on the real binary (`tests/supervision.rs`). It is read from the environment
//! only — no flag, no TOML key — and is not part of the documented configuration.

use std::time::Duration;

/// The environment variable of the test-only death injection.
pub const INJECT_DEATH_VAR: &str = "HOURGLASS_TEST_INJECT_DEATH";

/// A part of the server whose death ends the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    BrokerTask,
    StoreThread,
    Coordinator,
    /// The far tier's file writer (`spill_files.rs`).
    SpillWriter,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::BrokerTask => "broker task",
            Part::StoreThread => "store thread",
            Part::Coordinator => "cluster coordinator",
            Part::SpillWriter => "spill file writer",
        }
    }
}

/// Why the server stopped serving on its own.
#[derive(Debug, thiserror::Error)]
pub enum Died {
    #[error("the {} died ({reason}); exiting", part.name())]
    Part { part: Part, reason: String },
}

impl Died {
    pub fn new(part: Part, reason: impl Into<String>) -> Died {
        let reason = reason.into();
        tracing::error!(part = part.name(), %reason, "the {} died; exiting", part.name());
        Died::Part { part, reason }
    }
}

/// Test only: which part is made to panic, and how long after its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InjectedDeath {
    pub part: Part,
    pub after: Duration,
}

impl InjectedDeath {
    /// From [`INJECT_DEATH_VAR`], if set (an unreadable value is ignored with a warning).
    pub fn from_env() -> Option<InjectedDeath> {
        let value = std::env::var(INJECT_DEATH_VAR).ok()?;
        let parsed = InjectedDeath::parse(&value);
        if parsed.is_none() {
            tracing::warn!(%value, "{INJECT_DEATH_VAR} unreadable (want PART:SECONDS); ignored");
        }
        parsed
    }

    fn parse(value: &str) -> Option<InjectedDeath> {
        let (part, seconds) = value.split_once(':')?;
        let part = match part {
            "broker-task" => Part::BrokerTask,
            "store-thread" => Part::StoreThread,
            "coordinator" => Part::Coordinator,
            _ => return None,
        };
        Some(InjectedDeath { part, after: Duration::from_secs_f64(seconds.parse::<f64>().ok()?.max(0.0)) })
    }

    /// When `part` is to die, if it is the one.
    pub fn of(this: Option<InjectedDeath>, part: Part) -> Option<Duration> {
        this.filter(|d| d.part == part).map(|d| d.after)
    }
}

/// The panic a part is made to die with.
pub fn die_injected(part: Part) -> ! {
    panic!("injected death of the {} ({INJECT_DEATH_VAR}, test only)", part.name())
}

/// A panic's message, for the exit line.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        return format!("panicked: {text}");
    }
    match payload.downcast_ref::<String>() {
        Some(text) => format!("panicked: {text}"),
        None => "panicked".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_injection_names_a_part_and_seconds() {
        let parsed = InjectedDeath::parse("store-thread:2.5");
        assert_eq!(
            parsed,
            Some(InjectedDeath { part: Part::StoreThread, after: Duration::from_millis(2500) })
        );
        assert_eq!(InjectedDeath::of(parsed, Part::StoreThread), Some(Duration::from_millis(2500)));
        assert_eq!(InjectedDeath::of(parsed, Part::BrokerTask), None);
        assert_eq!(InjectedDeath::parse("broker:1"), None);
        assert_eq!(InjectedDeath::parse("coordinator"), None);
    }

    #[test]
    fn the_exit_line_says_which_part_died() {
        let died = Died::Part { part: Part::BrokerTask, reason: "panicked: boom".into() };
        assert_eq!(died.to_string(), "the broker task died (panicked: boom); exiting");
    }
}
