//! A queue's access policy (`Policy`, kept in `x-sqs-policy`), applied where it denies (issue 40,
//! item 15; docs/sqs.md "Queue policies"). Hourglass permissions decide what a user may do; a
//! policy's `Deny` statements take away from that, as an explicit deny does on AWS. `Allow`
//! statements grant nothing here: they name AWS principals and services this endpoint does not
//! have, and granting beyond a user's permissions would let a queue's writer open it to others.
//!
//! Understood: `Principal` `*`, `{"AWS": …}` naming every principal (`*`), an account (the
//! vhost's account id, or its `arn:aws:iam::{account}:root`), or a user
//! (`arn:aws:iam::{account}:user/{name}`, an Hourglass user of that vhost); `Action` /
//! `NotAction` (`sqs:SendMessage`, wildcards `*` and `?`, case-insensitive; a batch is its
//! single action's permission, as on AWS); `Resource` / `NotResource` (the queue's ARN, with
//! wildcards); `Condition` with `Bool` `aws:SecureTransport` and `IpAddress` / `NotIpAddress`
//! `aws:SourceIp`. A policy with a `Deny` statement using anything else (another condition,
//! `NotPrincipal`, a service principal) is refused by name ([`refusal`], `InvalidAttributeValue`):
//! a deny silently not applied would leave open what its writer meant to close. SetQueueAttributes is
//! never denied, so a policy that shuts everyone out can still be changed (`policy_target` in
//! `lib.rs`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::SqsError;
use crate::queues::{self, QueueRef};
use crate::{Caller, SqsState};

/// The queue argument that holds a queue's policy (JSON), as SetQueueAttributes writes it.
pub const POLICY_ARG: &str = "x-sqs-policy";
/// How long a queue's policy is used before it is read again: a change made over SQS applies
/// at once (the cache entry is dropped), any other within this (AWS: up to 60 s).
const CACHED_FOR: Duration = Duration::from_secs(1);
/// Queues whose policies are cached at most: past it the cache starts over.
const CACHED_QUEUES_MAX: usize = 10_000;

/// What a request is, for a policy.
pub struct RequestFacts<'a> {
    /// `sqs:` and the operation's permission name (a batch's single action).
    pub action: String,
    pub user: &'a str,
    /// The account id of the queue's vhost.
    pub account: &'a str,
    pub queue_arn: &'a str,
    pub secure_transport: bool,
    pub source_ip: Option<IpAddr>,
}

/// The `Deny` statements of a queue's policy that this endpoint applies.
#[derive(Debug, Default, PartialEq)]
pub struct QueuePolicy {
    denies: Vec<Deny>,
    /// A `Deny` this endpoint cannot apply ([`refusal`]'s reason). SetQueueAttributes never
    /// stores one, but a queue declared over AMQP or the HTTP API with an `x-sqs-policy`
    /// argument can carry one: then the policy denies every operation it could deny, rather
    /// than leave open what its writer meant to close, until SetQueueAttributes replaces it.
    unapplicable: Option<String>,
}

#[derive(Debug, PartialEq)]
struct Deny {
    sid: Option<String>,
    principals: Vec<String>,
    actions: Matching,
    resources: Option<Matching>,
    conditions: Vec<Condition>,
}

/// Patterns a value must match (`Action`), or must match none of (`NotAction`).
#[derive(Debug, PartialEq)]
struct Matching {
    patterns: Vec<String>,
    negated: bool,
}

#[derive(Debug, PartialEq)]
enum Condition {
    SecureTransport(bool),
    SourceIpIn(Vec<Cidr>),
    SourceIpNotIn(Vec<Cidr>),
}

#[derive(Debug, PartialEq)]
struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl QueuePolicy {
    /// The policy `text` states (a JSON policy document); what does not read applies nothing
    /// (SetQueueAttributes refuses such a `Deny` first: [`refusal`]).
    pub fn parse(text: &str) -> QueuePolicy {
        let denies = statements(text).iter().filter_map(|s| deny_of(s).ok().flatten()).collect();
        QueuePolicy { denies, unapplicable: refusal(text) }
    }

    /// Whether the policy denies no request at all.
    fn denies_nothing(&self) -> bool {
        self.denies.is_empty() && self.unapplicable.is_none()
    }

    /// The statement that denies `request`, by its `Sid` (or its place), if one does.
    pub fn denies(&self, request: &RequestFacts<'_>) -> Option<String> {
        if let Some(why) = &self.unapplicable {
            return Some(format!("{why}; a policy with a Deny that cannot be applied denies everything until SetQueueAttributes replaces it"));
        }
        self.denies
            .iter()
            .enumerate()
            .find(|(_, deny)| deny.applies(request))
            .map(|(at, deny)| deny.sid.clone().unwrap_or_else(|| format!("statement {}", at + 1)))
    }
}

/// Why the policy `text` cannot be kept: a `Deny` statement this endpoint could not apply,
/// named (a deny silently not applied would leave open what its writer meant to close).
/// `None` for a policy whose every `Deny` applies; `Allow` statements are kept as given.
pub fn refusal(text: &str) -> Option<String> {
    statements(text).iter().find_map(|statement| deny_of(statement).err())
}

/// A policy document's statements (one statement object counts as a list of one).
fn statements(text: &str) -> Vec<Value> {
    match serde_json::from_str::<Value>(text).ok().and_then(|mut d| d.get_mut("Statement").map(Value::take)) {
        Some(Value::Array(all)) => all,
        Some(one @ Value::Object(_)) => vec![one],
        _ => Vec::new(),
    }
}

/// A `Deny` statement as this endpoint applies it; `Ok(None)` for any other effect; `Err` naming
/// what of a `Deny` it cannot apply.
fn deny_of(statement: &Value) -> Result<Option<Deny>, String> {
    if statement.get("Effect").and_then(Value::as_str) != Some("Deny") {
        return Ok(None);
    }
    let which =
        statement.get("Sid").and_then(Value::as_str).map_or_else(String::new, |sid| format!(" {sid}"));
    let refuse = |what: String| Err(format!("the Deny statement{which}: {what}"));
    if statement.get("NotPrincipal").is_some() {
        return refuse("NotPrincipal is not supported; name the principals in Principal".into());
    }
    let principals = match statement.get("Principal") {
        Some(Value::String(star)) if star == "*" => vec!["*".to_owned()],
        Some(Value::Object(by_kind)) if by_kind.keys().all(|kind| kind == "AWS") => {
            match by_kind.get("AWS").and_then(strings) {
                Some(principals) => principals,
                None => return refuse("Principal's AWS must be a string or a list of strings".into()),
            }
        }
        _ => return refuse("Principal must be \"*\" or {\"AWS\": …} (no service principals here)".into()),
    };
    let Some(actions) = matching(statement, "Action", "NotAction") else {
        return refuse("it needs an Action or a NotAction of strings".into());
    };
    let resources = match (statement.get("Resource"), statement.get("NotResource")) {
        (None, None) => None,
        _ => match matching(statement, "Resource", "NotResource") {
            Some(resources) => Some(resources),
            None => return refuse("Resource or NotResource must be strings, not both".into()),
        },
    };
    let mut conditions = Vec::new();
    match statement.get("Condition") {
        None => {}
        Some(Value::Object(operators)) => {
            for (operator, keys) in operators {
                let Value::Object(keys) = keys else {
                    return refuse(format!("condition {operator} is not an object"));
                };
                for (key, values) in keys {
                    match strings(values).and_then(|values| condition(operator, key, &values)) {
                        Some(condition) => conditions.push(condition),
                        None => {
                            return refuse(format!(
                                "condition {operator} {key} is not supported (Bool aws:SecureTransport, \
                                 IpAddress and NotIpAddress aws:SourceIp are)"
                            ))
                        }
                    }
                }
            }
        }
        Some(_) => return refuse("Condition must be an object".into()),
    }
    let sid = statement.get("Sid").and_then(Value::as_str).map(str::to_owned);
    Ok(Some(Deny { sid, principals, actions, resources, conditions }))
}

fn matching(statement: &Value, key: &str, negated_key: &str) -> Option<Matching> {
    match (statement.get(key), statement.get(negated_key)) {
        (Some(value), None) => Some(Matching { patterns: strings(value)?, negated: false }),
        (None, Some(value)) => Some(Matching { patterns: strings(value)?, negated: true }),
        _ => None,
    }
}

fn strings(value: &Value) -> Option<Vec<String>> {
    match value {
        Value::String(one) => Some(vec![one.clone()]),
        Value::Array(all) => all.iter().map(|v| v.as_str().map(str::to_owned)).collect(),
        _ => None,
    }
}

fn condition(operator: &str, key: &str, values: &[String]) -> Option<Condition> {
    match (operator, key.to_ascii_lowercase().as_str()) {
        ("Bool", "aws:securetransport") => match values {
            [one] => Some(Condition::SecureTransport(one.eq_ignore_ascii_case("true"))),
            _ => None,
        },
        ("IpAddress", "aws:sourceip") => Some(Condition::SourceIpIn(cidrs(values)?)),
        ("NotIpAddress", "aws:sourceip") => Some(Condition::SourceIpNotIn(cidrs(values)?)),
        _ => None,
    }
}

fn cidrs(values: &[String]) -> Option<Vec<Cidr>> {
    values.iter().map(|v| Cidr::parse(v)).collect()
}

impl Cidr {
    fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix.parse::<u8>().ok()?)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().ok()?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(bits);
        (prefix <= bits).then_some(Cidr { network, prefix })
    }

    fn contains(&self, address: IpAddr) -> bool {
        let masked = |bytes: &[u8]| -> Vec<u8> {
            bytes
                .iter()
                .enumerate()
                .map(|(at, byte)| {
                    let left = usize::from(self.prefix).saturating_sub(at * 8).min(8);
                    byte & (0xffu16 << (8 - left)) as u8
                })
                .collect()
        };
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => masked(&net.octets()) == masked(&ip.octets()),
            (IpAddr::V6(net), IpAddr::V6(ip)) => masked(&net.octets()) == masked(&ip.octets()),
            _ => false,
        }
    }
}

impl Deny {
    fn applies(&self, request: &RequestFacts<'_>) -> bool {
        let principal = |p: &String| {
            p == "*"
                || p == request.account
                || *p == format!("arn:aws:iam::{}:root", request.account)
                || *p == format!("arn:aws:iam::{}:user/{}", request.account, request.user)
        };
        self.principals.iter().any(principal)
            && self.actions.admits(&request.action)
            && self.resources.as_ref().is_none_or(|r| r.admits(request.queue_arn))
            && self.conditions.iter().all(|c| c.holds(request))
    }
}

impl Matching {
    fn admits(&self, value: &str) -> bool {
        self.patterns.iter().any(|p| glob(&p.to_ascii_lowercase(), &value.to_ascii_lowercase()))
            != self.negated
    }
}

impl Condition {
    fn holds(&self, request: &RequestFacts<'_>) -> bool {
        match self {
            Condition::SecureTransport(wanted) => request.secure_transport == *wanted,
            Condition::SourceIpIn(cidrs) => {
                request.source_ip.is_some_and(|ip| cidrs.iter().any(|c| c.contains(ip)))
            }
            Condition::SourceIpNotIn(cidrs) => {
                request.source_ip.is_none_or(|ip| !cidrs.iter().any(|c| c.contains(ip)))
            }
        }
    }
}

/// IAM's wildcards: `*` any run of characters, `?` any one.
fn glob(pattern: &str, value: &str) -> bool {
    let (p, v): (Vec<char>, Vec<char>) = (pattern.chars().collect(), value.chars().collect());
    let (mut at_p, mut at_v, mut star, mut resume) = (0, 0, None, 0);
    while at_v < v.len() {
        if at_p < p.len() && (p[at_p] == '?' || p[at_p] == v[at_v]) {
            at_p += 1;
            at_v += 1;
        } else if at_p < p.len() && p[at_p] == '*' {
            star = Some(at_p);
            resume = at_v;
            at_p += 1;
        } else if let Some(s) = star {
            at_p = s + 1;
            resume += 1;
            at_v = resume;
        } else {
            return false;
        }
    }
    p[at_p..].iter().all(|c| *c == '*')
}

/// The permission an operation is authorised as (a batch as its single action), `sqs:`-prefixed.
pub fn permission_of(operation: &str) -> String {
    let single = operation.strip_suffix("Batch").unwrap_or(operation);
    format!("sqs:{single}")
}

/// Each queue's policy as last read, and when, by (vhost, queue).
type Cached = HashMap<(String, String), (Instant, Arc<QueuePolicy>)>;

/// Each queue's policy as last read, and when.
#[derive(Debug, Default)]
pub struct PolicyCache {
    entries: Mutex<Cached>,
}

impl PolicyCache {
    fn lock(&self) -> MutexGuard<'_, Cached> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets `queue`'s policy (it was just changed or the queue deleted over SQS).
    pub fn forget(&self, queue: &QueueRef) {
        self.lock().remove(&(queue.vhost.clone(), queue.name.clone()));
    }
}

/// Refuses `operation` on `queue` when the queue's policy denies it to `caller`
/// (`AccessDenied`). A queue that does not exist is left to the operation to answer.
pub async fn check(
    state: &SqsState,
    caller: &Caller,
    operation: &str,
    queue: &QueueRef,
) -> Result<(), SqsError> {
    let key = (queue.vhost.clone(), queue.name.clone());
    let cached =
        state.policies.lock().get(&key).filter(|(at, _)| at.elapsed() < CACHED_FOR).map(|(_, p)| p.clone());
    let policy = match cached {
        Some(policy) => policy,
        None => {
            let arguments = match queues::arguments_of(state, queue).await {
                Ok(arguments) => arguments,
                Err(_) => return Ok(()),
            };
            let text = match arguments.get(POLICY_ARG) {
                Some(hourglass_wire::FieldValue::LongStr(text)) => text.as_str().into_owned(),
                _ => String::new(),
            };
            let policy = Arc::new(QueuePolicy::parse(&text));
            let mut entries = state.policies.lock();
            if entries.len() >= CACHED_QUEUES_MAX {
                entries.clear();
            }
            entries.insert(key, (Instant::now(), policy.clone()));
            policy
        }
    };
    if policy.denies_nothing() {
        return Ok(());
    }
    let account = queues::account_of(&queue.vhost);
    let queue_arn = queues::arn_of(caller, &queue.vhost, &queue.name);
    let facts = RequestFacts {
        action: permission_of(operation),
        user: &caller.user,
        account: &account,
        queue_arn: &queue_arn,
        secure_transport: caller.base_url.starts_with("https://"),
        source_ip: caller.address,
    };
    match policy.denies(&facts) {
        None => Ok(()),
        Some(statement) => Err(SqsError::AccessDenied(format!(
            "{} on queue '{}' in vhost '{}' (denied by the queue's policy, {statement})",
            facts.action, queue.name, queue.vhost
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(action: &str, user: &'a str, secure: bool, ip: &str) -> RequestFacts<'a> {
        RequestFacts {
            action: permission_of(action),
            user,
            account: "000000000000",
            queue_arn: "arn:aws:sqs:us-east-1:000000000000:orders",
            secure_transport: secure,
            source_ip: ip.parse().ok(),
        }
    }

    #[test]
    fn a_deny_of_insecure_transport_refuses_plain_http_only() {
        let policy = QueuePolicy::parse(
            r#"{"Version":"2012-10-17","Statement":[{"Sid":"TlsOnly","Effect":"Deny","Principal":"*",
                "Action":"sqs:*","Resource":"arn:aws:sqs:*:*:orders",
                "Condition":{"Bool":{"aws:SecureTransport":"false"}}}]}"#,
        );
        assert_eq!(policy.denies(&facts("SendMessage", "u", false, "10.0.0.1")), Some("TlsOnly".into()));
        assert_eq!(policy.denies(&facts("SendMessage", "u", true, "10.0.0.1")), None);
    }

    #[test]
    fn principals_actions_batches_and_source_addresses() {
        let policy = QueuePolicy::parse(
            r#"{"Statement":{"Effect":"Deny","Principal":{"AWS":["arn:aws:iam::000000000000:user/intern"]},
                "Action":["sqs:Delete*","sqs:PurgeQueue"],
                "Condition":{"NotIpAddress":{"aws:SourceIp":["10.0.0.0/8","2001:db8::/32"]}}}}"#,
        );
        assert!(
            policy.denies(&facts("DeleteMessageBatch", "intern", true, "192.0.2.1")).is_some(),
            "a batch is its action"
        );
        assert!(
            policy.denies(&facts("DeleteMessage", "intern", true, "10.1.2.3")).is_none(),
            "inside the network"
        );
        assert!(policy.denies(&facts("DeleteMessage", "intern", true, "2001:db8::1")).is_none());
        assert!(policy.denies(&facts("DeleteMessage", "admin", true, "192.0.2.1")).is_none(), "another user");
        assert!(
            policy.denies(&facts("SendMessage", "intern", true, "192.0.2.1")).is_none(),
            "another action"
        );
        assert!(policy.denies(&facts("PurgeQueue", "intern", true, "::ffff:192.0.2.1")).is_some());
    }

    #[test]
    fn allows_and_what_does_not_read_deny_nothing() {
        for text in [r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"}]}"#, "not json", ""]
        {
            assert!(
                QueuePolicy::parse(text).denies(&facts("SendMessage", "u", false, "10.0.0.1")).is_none(),
                "{text}"
            );
        }
        let not_action = QueuePolicy::parse(
            r#"{"Statement":[{"Effect":"Deny","Principal":{"AWS":"000000000000"},"NotAction":"sqs:Receive*"}]}"#,
        );
        assert!(not_action.denies(&facts("SendMessage", "u", true, "10.0.0.1")).is_some());
        assert!(not_action.denies(&facts("ReceiveMessage", "u", true, "10.0.0.1")).is_none());
    }

    /// A Deny that cannot be applied, which only a queue declared with `x-sqs-policy` over AMQP or
    /// HTTP can carry, denies every request, naming why (before, it denied nothing: what its
    /// writer meant to close stayed open).
    #[test]
    fn a_deny_that_cannot_be_applied_denies_everything() {
        for text in [
            r#"{"Statement":[{"Effect":"Deny","Principal":"*","Action":"sqs:DeleteQueue","Condition":{"StringEquals":{"aws:SourceVpce":"vpce-1"}}}]}"#,
            r#"{"Statement":[{"Effect":"Deny","NotPrincipal":{"AWS":"x"},"Action":"sqs:*"}]}"#,
        ] {
            let policy = QueuePolicy::parse(text);
            let why = policy.denies(&facts("SendMessage", "u", true, "10.0.0.1")).expect(text);
            assert!(why.contains("the Deny statement") && why.contains("denies everything"), "{why}");
            assert!(!policy.denies_nothing());
        }
    }

    /// A Deny that cannot be applied is refused by name when the policy is set; Allows are kept.
    #[test]
    fn a_deny_that_cannot_be_applied_is_refused_by_name() {
        let vpce = r#"{"Statement":[{"Sid":"VpcOnly","Effect":"Deny","Principal":"*","Action":"sqs:*",
            "Condition":{"StringNotEquals":{"aws:SourceVpce":"vpce-1"}}}]}"#;
        let why = refusal(vpce).expect("refused");
        assert!(why.contains("VpcOnly") && why.contains("StringNotEquals aws:SourceVpce"), "{why}");
        let not_principal = r#"{"Statement":{"Effect":"Deny","NotPrincipal":{"AWS":"x"},"Action":"sqs:*"}}"#;
        assert!(refusal(not_principal).unwrap().contains("NotPrincipal"));
        let service =
            r#"{"Statement":{"Effect":"Deny","Principal":{"Service":"sns.amazonaws.com"},"Action":"sqs:*"}}"#;
        assert!(refusal(service).unwrap().contains("Principal"));
        let sns = r#"{"Statement":[{"Effect":"Allow","Principal":{"Service":"sns.amazonaws.com"},
            "Action":"sqs:SendMessage","Condition":{"ArnEquals":{"aws:SourceArn":"arn:aws:sns:x"}}}]}"#;
        assert_eq!(refusal(sns), None, "an SNS subscription's Allow is kept as given");
        let applied = r#"{"Statement":{"Effect":"Deny","Principal":"*","Action":"sqs:*",
            "Condition":{"Bool":{"aws:SecureTransport":"false"}}}}"#;
        assert_eq!(refusal(applied), None);
    }

    #[test]
    fn wildcards() {
        assert!(glob("sqs:*", "sqs:sendmessage"));
        assert!(glob("sqs:send?essage", "sqs:sendmessage"));
        assert!(glob("arn:aws:sqs:*:*:ord*", "arn:aws:sqs:us-east-1:0:orders"));
        assert!(!glob("sqs:receive*", "sqs:sendmessage"));
        assert!(!glob("", "x"));
    }
}
