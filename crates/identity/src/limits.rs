//! RabbitMQ's per-vhost limits (`max-connections`, `max-queues`: the `vhost-limits` runtime
//! parameter) and per-user limits (`max-connections`, `max-channels`), as the store keeps them.
//!
//! A limit is kept as given — any integer; RabbitMQ lists `-1` back as `-1` — and means: absent
//! or negative, no limit; 0, nothing allowed; N, at most N. What is counted against them and the
//! client's error live elsewhere: connections and channels in `hourglass_session`
//! (`client_limits.rs`), queues in the broker (queue.declare).

use std::collections::BTreeMap;

use serde_json::Value;

/// The names a vhost's limits may have (RabbitMQ's `vhost_limit_validation`).
pub const VHOST_LIMIT_NAMES: [&str; 2] = ["max-connections", "max-queues"];
/// The names a user's limits may have (RabbitMQ's `user_limit_validation`).
pub const USER_LIMIT_NAMES: [&str; 2] = ["max-connections", "max-channels"];

/// Which record the limits belong to: decides the allowed names and RabbitMQ's wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitsOf {
    Vhost,
    User,
}

/// One record's limits: name → value, sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits(BTreeMap<String, i64>);

impl LimitsOf {
    fn names(self) -> &'static [&'static str] {
        match self {
            LimitsOf::Vhost => &VHOST_LIMIT_NAMES,
            LimitsOf::User => &USER_LIMIT_NAMES,
        }
    }

    /// The name RabbitMQ's validation errors give the whole set.
    fn term(self) -> &'static str {
        match self {
            LimitsOf::Vhost => "limits",
            LimitsOf::User => "user-limits",
        }
    }
}

impl Limits {
    /// Limits from a JSON object (`{"max-connections": 10}`), checked as RabbitMQ's
    /// `rabbit_parameter_validation:proplist` checks them, with its texts: unknown names are
    /// `Unrecognised terms [...] in limits`, a value that is not an integer `NAME should be a
    /// number, actually was V` (values shown as Erlang prints them).
    pub fn from_json(of: LimitsOf, value: &Value) -> Result<Limits, String> {
        let Value::Object(map) = value else {
            return Err(format!("{} not a list {}", of.term(), erlang_term(value)));
        };
        let mut limits = Limits::default();
        let mut unknown = Vec::new();
        for (name, value) in map {
            if !of.names().contains(&name.as_str()) {
                unknown.push(format!("{{<<\"{name}\">>,{}}}", erlang_term(value)));
                continue;
            }
            limits.0.insert(name.clone(), limit_value(name, value)?);
        }
        if !unknown.is_empty() {
            return Err(format!("Unrecognised terms [{}] in {}", unknown.join(","), of.term()));
        }
        Ok(limits)
    }

    /// One limit set to `value` (a JSON integer), the others kept (the API's PUT of one name).
    pub fn with(mut self, of: LimitsOf, name: &str, value: &Value) -> Result<Limits, String> {
        let one: serde_json::Map<String, Value> = [(name.to_owned(), value.clone())].into_iter().collect();
        let parsed = Limits::from_json(of, &Value::Object(one))?;
        self.0.extend(parsed.0);
        Ok(self)
    }

    /// Without the limit `name` (`all`: without any, as `clear_user_limits USER all`).
    pub fn without(mut self, name: &str) -> Limits {
        if name == "all" {
            self.0.clear();
        } else {
            self.0.remove(name);
        }
        self
    }

    /// The limit in force: `None` when absent or negative (no limit).
    pub fn effective(&self, name: &str) -> Option<u64> {
        self.0.get(name).and_then(|&value| u64::try_from(value).ok())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every limit as given, sorted by name.
    pub fn entries(&self) -> &BTreeMap<String, i64> {
        &self.0
    }

    /// As the API and definitions show them: `{"max-connections": 10}`.
    pub fn to_json(&self) -> Value {
        Value::Object(self.0.iter().map(|(name, value)| (name.clone(), Value::from(*value))).collect())
    }

    /// From a saved file (already checked when set).
    pub(crate) fn from_entries(entries: BTreeMap<String, i64>) -> Limits {
        Limits(entries)
    }
}

fn limit_value(name: &str, value: &Value) -> Result<i64, String> {
    value.as_i64().ok_or_else(|| format!("{name} should be a number, actually was {}", erlang_term(value)))
}

/// A JSON value as RabbitMQ's messages print the Erlang term it decodes to (`<<"x">>` for a
/// string), so error texts read the same.
fn erlang_term(value: &Value) -> String {
    match value {
        Value::String(s) => format!("<<\"{s}\">>"),
        Value::Null => "null".to_owned(),
        Value::Array(items) => format!("[{}]", items.iter().map(erlang_term).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Names and values are checked with RabbitMQ's texts (checked against rabbitmqctl 3.10.8).
    #[test]
    fn validation_matches_rabbitmq() {
        let limits =
            Limits::from_json(LimitsOf::Vhost, &json!({"max-connections": 1, "max-queues": -1})).unwrap();
        assert_eq!((limits.effective("max-connections"), limits.effective("max-queues")), (Some(1), None));
        assert_eq!(limits.to_json(), json!({"max-connections": 1, "max-queues": -1}), "-1 is kept as given");
        let unknown = Limits::from_json(LimitsOf::Vhost, &json!({"max-conn": 1})).unwrap_err();
        assert_eq!(unknown, r#"Unrecognised terms [{<<"max-conn">>,1}] in limits"#);
        let unknown = Limits::from_json(LimitsOf::User, &json!({"max-queues": 1})).unwrap_err();
        assert_eq!(unknown, r#"Unrecognised terms [{<<"max-queues">>,1}] in user-limits"#);
        let bad = Limits::from_json(LimitsOf::User, &json!({"max-connections": "x"})).unwrap_err();
        assert_eq!(bad, r#"max-connections should be a number, actually was <<"x">>"#);
        assert!(Limits::from_json(LimitsOf::User, &json!({"max-channels": 1.5})).is_err());
    }

    /// One limit is set or cleared without touching the others; `all` clears every one.
    #[test]
    fn with_and_without_change_one_limit() {
        let limits = Limits::default().with(LimitsOf::User, "max-channels", &json!(0)).unwrap();
        let limits = limits.with(LimitsOf::User, "max-connections", &json!(3)).unwrap();
        assert_eq!(limits.effective("max-channels"), Some(0), "0 allows nothing, it is not 'no limit'");
        assert_eq!(limits.clone().without("max-channels").to_json(), json!({"max-connections": 3}));
        assert!(limits.without("all").is_empty());
    }
}
