//! Headers exchange: a binding's arguments are matched against the message's headers.
//! `x-match` = `all` (default) or `any` ignore binding keys starting with `x-`; `all-with-x` and
//! `any-with-x` include them (RabbitMQ 3.10+). A binding value of type void matches on presence.

use hourglass_wire::{FieldTable, FieldValue};

use super::{Binding, Destinations};
use crate::api::AmqpError;
use crate::errors;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum MatchMode {
    All,
    Any,
    AllWithX,
    AnyWithX,
}

pub(super) fn route<'b>(
    bindings: impl Iterator<Item = &'b Binding>,
    headers: Option<&FieldTable>,
    out: &mut Destinations,
) {
    let empty = FieldTable::new();
    let headers = headers.unwrap_or(&empty);
    out.extend(bindings.filter(|b| matches(&b.arguments, headers)).map(|b| b.destination.clone()));
}

/// Rejects an `x-match` value RabbitMQ would refuse at bind time.
pub(crate) fn validate_binding_arguments(arguments: &FieldTable) -> Result<(), AmqpError> {
    match arguments.get("x-match") {
        None => Ok(()),
        Some(value) if parse_mode(&value).is_some() => Ok(()),
        Some(value) => {
            let shown = match value.as_bytes() {
                Some(bytes) => format!("<<\"{}\">>", String::from_utf8_lossy(bytes)),
                None => format!("{value:?}"),
            };
            Err(errors::precondition_failed(format!(
                "Invalid x-match field value {shown}; expected all, any, all-with-x, or any-with-x"
            )))
        }
    }
}

fn parse_mode(value: &FieldValue) -> Option<MatchMode> {
    match value.as_bytes()? {
        b"all" => Some(MatchMode::All),
        b"any" => Some(MatchMode::Any),
        b"all-with-x" => Some(MatchMode::AllWithX),
        b"any-with-x" => Some(MatchMode::AnyWithX),
        _ => None,
    }
}

fn matches(binding_args: &FieldTable, headers: &FieldTable) -> bool {
    let mode = binding_args.get("x-match").and_then(|v| parse_mode(&v)).unwrap_or(MatchMode::All);
    let with_x = matches!(mode, MatchMode::AllWithX | MatchMode::AnyWithX);
    let wanted = binding_args
        .iter()
        .filter(|(key, _)| key.as_bytes() != b"x-match")
        .filter(|(key, _)| with_x || !key.as_bytes().starts_with(b"x-"));
    for (key, expected) in wanted {
        let found = headers.iter().find(|(k, _)| k == &key).map(|(_, v)| v);
        let hit = match (&expected, found) {
            (_, None) => false,
            (FieldValue::Void, Some(_)) => true,
            (expected, Some(actual)) => *expected == actual,
        };
        match mode {
            MatchMode::All | MatchMode::AllWithX if !hit => return false,
            MatchMode::Any | MatchMode::AnyWithX if hit => return true,
            _ => {}
        }
    }
    match mode {
        MatchMode::All | MatchMode::AllWithX => true,
        // `any` matched nothing (or had nothing to compare), as RabbitMQ.
        MatchMode::Any | MatchMode::AnyWithX => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        FieldTable::from_entries(entries.iter().cloned())
    }

    fn s(v: &str) -> FieldValue {
        FieldValue::LongStr(v.into())
    }

    /// x-match=all needs every non-x binding header present with an equal value.
    #[test]
    fn all_requires_every_header() {
        let binding = table(&[("x-match", s("all")), ("a", s("1")), ("b", s("2"))]);
        assert!(matches(&binding, &table(&[("a", s("1")), ("b", s("2")), ("c", s("3"))])));
        assert!(!matches(&binding, &table(&[("a", s("1"))])));
        assert!(!matches(&binding, &table(&[("a", s("1")), ("b", s("9"))])));
    }

    /// x-match=any needs one equal header; `x-` keys only count in the -with-x modes.
    #[test]
    fn any_requires_one_header_and_x_keys_need_with_x() {
        let binding = table(&[("x-match", s("any")), ("a", s("1")), ("x-k", s("v"))]);
        assert!(matches(&binding, &table(&[("a", s("1"))])));
        assert!(!matches(&binding, &table(&[("x-k", s("v"))])));
        let with_x = table(&[("x-match", s("any-with-x")), ("a", s("1")), ("x-k", s("v"))]);
        assert!(matches(&with_x, &table(&[("x-k", s("v"))])));
    }

    /// A void binding value matches any value of that header; no x-match means all.
    #[test]
    fn void_matches_presence_and_default_is_all() {
        let binding = table(&[("a", FieldValue::Void)]);
        assert!(matches(&binding, &table(&[("a", FieldValue::I32(5))])));
        assert!(!matches(&binding, &table(&[])));
    }

    /// An unknown x-match value is refused at bind time with 406.
    #[test]
    fn invalid_x_match_is_refused() {
        let err = validate_binding_arguments(&table(&[("x-match", s("some"))])).unwrap_err();
        assert_eq!(err.reply_code, 406);
    }
}
