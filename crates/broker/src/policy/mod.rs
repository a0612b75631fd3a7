//! Policies and operator policies (semantics §6; RabbitMQ's rabbit_policy). Per vhost, a policy is a
//! name, a regular expression matched against queue and exchange names, what kinds of object it
//! applies to, a priority and a definition (settings as RabbitMQ names them, without `x-`). Of the
//! policies matching an object, the one with the highest priority applies (ties: the name that
//! sorts first, where RabbitMQ leaves it undefined); likewise one operator policy.
//!
//! | file | job |
//! |---|---|
//! | `definition.rs` | which keys a definition may hold, checked by the queue arguments' own validation |
//! | `merge.rs` | how queue arguments, a policy and an operator policy combine |
//! | `apply.rs` | re-matching queues and exchanges when policies or objects change |
//!
//! Leaves to others: the HTTP API and its JSON (mgmt), the set/clear/list entry points
//! (`admin/policies.rs`), the durable encoding (`persist/definitions.rs`).

pub(crate) mod apply;
mod definition;
pub(crate) mod merge;

use std::collections::BTreeMap;

use hourglass_wire::{FieldTable, ShortStr};

use crate::queue::{QueueSettings, QueueType};

/// RabbitMQ's limit on a policy name (a runtime parameter name).
pub const MAX_POLICY_NAME_BYTES: usize = 255;
/// Patterns are matched against every new queue and exchange: a bound keeps that cheap.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// Policies of one kind per vhost: each declare is matched against all of them.
pub const MAX_POLICIES_PER_VHOST: usize = 1024;

/// User policies (`/api/policies`) or operator policies (`/api/operator-policies`), which may set
/// only resource limits and win where lower (semantics §6).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    User,
    Operator,
}

/// A policy as it is set, listed and stored: the fields of RabbitMQ's API and definitions file.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    pub name: String,
    pub pattern: String,
    /// `all`, `queues`, `classic_queues`, `quorum_queues`, `streams` or `exchanges`.
    pub apply_to: String,
    pub priority: i64,
    /// Keys as RabbitMQ names them (`message-ttl`), values as given.
    pub definition: FieldTable,
}

/// A policy with the vhost it belongs to, for listings.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyInfo {
    pub vhost: String,
    pub spec: PolicySpec,
}

/// Why a policy could not be set or cleared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyError {
    NoVhost(String),
    NotFound {
        vhost: String,
        name: String,
    },
    /// The policy is refused; RabbitMQ's text after "Validation failed".
    Invalid(String),
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyError::NoVhost(vhost) => write!(f, "no vhost '{vhost}'"),
            PolicyError::NotFound { vhost, name } => write!(f, "no policy '{name}' in vhost '{vhost}'"),
            PolicyError::Invalid(reason) => write!(f, "Validation failed\n\n{reason}\n"),
        }
    }
}

impl std::error::Error for PolicyError {}

/// What `apply-to` selects (RabbitMQ 3.12+ also takes a queue type).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApplyTo {
    All,
    Queues,
    ClassicQueues,
    QuorumQueues,
    /// Accepted for RabbitMQ's definitions; Hourglass has no streams, so it matches nothing.
    Streams,
    Exchanges,
}

/// What a policy is matched against.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Object {
    Queue(QueueType),
    Exchange,
}

/// A checked policy, ready to match.
#[derive(Debug)]
pub(crate) struct Policy {
    pub spec: PolicySpec,
    apply_to: ApplyTo,
    regex: fancy_regex::Regex,
    /// The definition's queue settings.
    pub queue: QueueSettings,
    /// The definition's `alternate-exchange` (exchanges; user policies only).
    pub alternate_exchange: Option<ShortStr>,
}

/// The policies of one vhost, by kind and name.
#[derive(Debug, Default)]
pub(crate) struct Policies {
    user: BTreeMap<String, Policy>,
    operator: BTreeMap<String, Policy>,
}

impl ApplyTo {
    fn parse(text: &str) -> Option<ApplyTo> {
        Some(match text {
            "all" => ApplyTo::All,
            "queues" => ApplyTo::Queues,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "streams" => ApplyTo::Streams,
            "exchanges" => ApplyTo::Exchanges,
            _ => return None,
        })
    }

    fn covers(self, object: Object) -> bool {
        matches!(
            (self, object),
            (ApplyTo::All, _)
                | (ApplyTo::Queues, Object::Queue(_))
                | (ApplyTo::ClassicQueues, Object::Queue(QueueType::Classic))
                | (ApplyTo::QuorumQueues, Object::Queue(QueueType::Quorum))
                | (ApplyTo::Exchanges, Object::Exchange)
        )
    }
}

impl Policy {
    /// Checks a policy as RabbitMQ's rabbit_policy:validate does; the error is the reason text.
    pub fn new(kind: PolicyKind, spec: PolicySpec) -> Result<Policy, String> {
        if spec.name.is_empty() || spec.name.len() > MAX_POLICY_NAME_BYTES {
            return Err(format!("policy name must be 1 to {MAX_POLICY_NAME_BYTES} bytes long"));
        }
        crate::table_limits::check_table("policy definition", &spec.definition).map_err(|e| e.to_string())?;
        if spec.pattern.len() > MAX_PATTERN_BYTES {
            return Err(format!("pattern is longer than {MAX_PATTERN_BYTES} bytes"));
        }
        let regex = fancy_regex::Regex::new(&spec.pattern)
            .map_err(|e| format!("pattern should be regular expression but is invalid: {e}"))?;
        let apply_to = ApplyTo::parse(&spec.apply_to).ok_or_else(|| {
            format!(
                "apply-to '{}' unrecognised; should be one of: 'queues', 'classic_queues', \
                 'quorum_queues', 'streams', 'exchanges', or 'all'",
                spec.apply_to
            )
        })?;
        let definition = definition::parse(kind, &spec.definition)?;
        Ok(Policy {
            spec,
            apply_to,
            regex,
            queue: definition.queue,
            alternate_exchange: definition.alternate_exchange,
        })
    }

    /// Whether this policy applies to `object` named `name`: its kind is covered and the pattern
    /// matches somewhere in the name (unanchored, as RabbitMQ's `re:run`).
    pub fn matches(&self, object: Object, name: &[u8]) -> bool {
        if !self.apply_to.covers(object) {
            return false;
        }
        let name = String::from_utf8_lossy(name);
        // An error is fancy-regex's backtracking limit: treated as no match, like a PCRE error.
        self.regex.is_match(name.as_ref()).unwrap_or(false)
    }
}

impl Policies {
    pub fn of(&self, kind: PolicyKind) -> &BTreeMap<String, Policy> {
        match kind {
            PolicyKind::User => &self.user,
            PolicyKind::Operator => &self.operator,
        }
    }

    fn of_mut(&mut self, kind: PolicyKind) -> &mut BTreeMap<String, Policy> {
        match kind {
            PolicyKind::User => &mut self.user,
            PolicyKind::Operator => &mut self.operator,
        }
    }

    /// Adds or replaces a policy; returns whether it is new, or the reason it is refused.
    pub fn insert(&mut self, kind: PolicyKind, policy: Policy) -> Result<bool, String> {
        let all = self.of_mut(kind);
        if !all.contains_key(&policy.spec.name) && all.len() >= MAX_POLICIES_PER_VHOST {
            return Err(format!("a vhost holds at most {MAX_POLICIES_PER_VHOST} policies of a kind"));
        }
        Ok(all.insert(policy.spec.name.clone(), policy).is_none())
    }

    pub fn remove(&mut self, kind: PolicyKind, name: &str) -> Option<Policy> {
        self.of_mut(kind).remove(name)
    }

    /// The policy of `kind` that applies to `object` named `name`: the highest priority among
    /// those matching, the first by name among equals.
    pub fn best(&self, kind: PolicyKind, object: Object, name: &[u8]) -> Option<&Policy> {
        let mut best: Option<&Policy> = None;
        for policy in self.of(kind).values().filter(|p| p.matches(object, name)) {
            if best.is_none_or(|b| policy.spec.priority > b.spec.priority) {
                best = Some(policy);
            }
        }
        best
    }

    /// The definition of the named policy, for listings.
    pub fn definition(&self, kind: PolicyKind, name: Option<&String>) -> Option<&FieldTable> {
        name.and_then(|n| self.of(kind).get(n)).map(|p| &p.spec.definition)
    }
}

#[cfg(test)]
mod tests {
    use hourglass_wire::FieldValue;

    use super::*;

    fn spec(name: &str, pattern: &str, apply_to: &str, priority: i64) -> PolicySpec {
        PolicySpec {
            name: name.to_owned(),
            pattern: pattern.to_owned(),
            apply_to: apply_to.to_owned(),
            priority,
            definition: FieldTable::from_entries([("max-length", FieldValue::I64(1))]),
        }
    }

    fn policies(specs: &[PolicySpec]) -> Policies {
        let mut all = Policies::default();
        for s in specs {
            all.insert(PolicyKind::User, Policy::new(PolicyKind::User, s.clone()).unwrap()).unwrap();
        }
        all
    }

    const CLASSIC: Object = Object::Queue(QueueType::Classic);

    /// The matching policy with the highest priority applies; ties go to the first name.
    #[test]
    fn highest_priority_match_wins() {
        let all = policies(&[spec("low", "^jobs", "all", 1), spec("high", "jobs", "queues", 5)]);
        assert_eq!(all.best(PolicyKind::User, CLASSIC, b"jobs.a").unwrap().spec.name, "high");
        assert_eq!(all.best(PolicyKind::User, CLASSIC, b"my.jobs").unwrap().spec.name, "high");
        assert!(all.best(PolicyKind::User, CLASSIC, b"other").is_none());
        let tied = policies(&[spec("b", ".*", "all", 0), spec("a", ".*", "all", 0)]);
        assert_eq!(tied.best(PolicyKind::User, CLASSIC, b"q").unwrap().spec.name, "a");
    }

    /// apply-to selects queues, exchanges or one queue type, as RabbitMQ 3.12+.
    #[test]
    fn apply_to_selects_the_kind_of_object() {
        let all = policies(&[
            spec("x", "^a", "exchanges", 0),
            spec("quorum", "^a", "quorum_queues", 0),
            spec("streams", "^a", "streams", 9),
        ]);
        assert_eq!(all.best(PolicyKind::User, Object::Exchange, b"a").unwrap().spec.name, "x");
        let quorum = Object::Queue(QueueType::Quorum);
        assert_eq!(all.best(PolicyKind::User, quorum, b"a").unwrap().spec.name, "quorum");
        assert!(all.best(PolicyKind::User, CLASSIC, b"a").is_none());
    }

    /// Patterns are PCRE-like: lookahead works, as in RabbitMQ's `^(?!amq\.).*` idiom.
    #[test]
    fn lookahead_patterns_match_as_in_rabbitmq() {
        let all = policies(&[spec("not-amq", r"^(?!amq\.).*", "queues", 0)]);
        assert!(all.best(PolicyKind::User, CLASSIC, b"orders").is_some());
        assert!(all.best(PolicyKind::User, CLASSIC, b"amq.gen-1").is_none());
    }

    /// A bad pattern or apply-to is refused with RabbitMQ's wording.
    #[test]
    fn bad_pattern_and_apply_to_are_refused() {
        let err = Policy::new(PolicyKind::User, spec("p", "(", "all", 0)).unwrap_err();
        assert!(err.starts_with("pattern should be regular expression but is invalid"), "{err}");
        let err = Policy::new(PolicyKind::User, spec("p", "a", "things", 0)).unwrap_err();
        assert!(err.starts_with("apply-to 'things' unrecognised"), "{err}");
    }
}
