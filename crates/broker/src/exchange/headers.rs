//! Headers exchange: a binding's arguments are matched against the message's headers.
//! `x-match` = `all` (default) or `any` ignore binding keys starting with `x-`; `all-with-x` and
//! `any-with-x` include them (RabbitMQ 3.10+). A binding value of type void matches on presence.
//!
//! A message's headers are decoded and sorted by name once per publish, and each binding argument
//! is looked up by binary search: a publish costs O(H log H + A log H) for H headers and A binding
//! arguments in all. Scanning the headers for every argument cost H × A field decodes, and both
//! sides fit ~20,000 entries in a 128 KiB frame (issue #12: a freeze, as with topic `#`s).
//! RabbitMQ sorts both tables and merges them (rabbit_exchange_type_headers).

use hourglass_wire::{FieldTable, FieldValue, ShortStr};

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
    let headers = SortedHeaders::of(headers);
    out.extend(bindings.filter(|b| matches(&b.arguments, &headers)).map(|b| b.destination.clone()));
}

/// A message's headers sorted by name (stably: the first of equal names, in wire order, is found
/// first, as a scan would find it).
struct SortedHeaders {
    entries: Vec<(ShortStr, FieldValue)>,
    /// Name comparisons made by lookups, for the tests' bound.
    comparisons: std::cell::Cell<usize>,
}

impl SortedHeaders {
    fn of(headers: Option<&FieldTable>) -> SortedHeaders {
        let mut entries: Vec<(ShortStr, FieldValue)> =
            headers.map(|h| h.iter().collect()).unwrap_or_default();
        entries.sort_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
        SortedHeaders { entries, comparisons: std::cell::Cell::new(0) }
    }

    /// The value of the first header named `name`.
    fn get(&self, name: &ShortStr) -> Option<&FieldValue> {
        let at = self.entries.partition_point(|(key, _)| {
            self.comparisons.set(self.comparisons.get() + 1);
            key.as_bytes() < name.as_bytes()
        });
        self.entries.get(at).filter(|(key, _)| key == name).map(|(_, value)| value)
    }
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

fn matches(binding_args: &FieldTable, headers: &SortedHeaders) -> bool {
    let mode = binding_args.get("x-match").and_then(|v| parse_mode(&v)).unwrap_or(MatchMode::All);
    let with_x = matches!(mode, MatchMode::AllWithX | MatchMode::AnyWithX);
    let wanted = binding_args
        .iter()
        .filter(|(key, _)| key.as_bytes() != b"x-match")
        .filter(|(key, _)| with_x || !key.as_bytes().starts_with(b"x-"));
    for (key, expected) in wanted {
        let hit = match (&expected, headers.get(&key)) {
            (_, None) => false,
            (FieldValue::Void, Some(_)) => true,
            (expected, Some(actual)) => expected == actual,
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

    fn matches(binding: &FieldTable, headers: &FieldTable) -> bool {
        super::matches(binding, &SortedHeaders::of(Some(headers)))
    }

    /// Issue #12: a binding with 20,000 arguments against a message with 20,000 headers (each
    /// fits a 128 KiB frame) is decided with O(log H) name comparisons per argument, not a scan
    /// of the headers per argument (4 × 10⁸ field decodes per publish before).
    #[test]
    fn wide_binding_and_wide_headers_match_in_log_comparisons_per_argument() {
        let count: usize = 20_000;
        let names: Vec<String> = (0..count).map(|i| format!("h{i}")).collect();
        let binding = FieldTable::from_entries(names.iter().map(|n| (n.as_str(), FieldValue::Void)));
        let mut headers =
            FieldTable::from_entries(names.iter().rev().map(|n| (n.as_str(), FieldValue::I32(1))));
        let sorted = SortedHeaders::of(Some(&headers));
        assert!(super::matches(&binding, &sorted), "every argument is present");
        let per_lookup = usize::BITS - count.leading_zeros() + 1;
        let bound = count * per_lookup as usize;
        assert!(sorted.comparisons.get() <= bound, "{} comparisons > {bound}", sorted.comparisons.get());
        headers = headers.without_key("h19999");
        assert!(!matches(&binding, &headers), "one argument missing");
    }

    /// Of two headers with the same name, the first in wire order is the one compared.
    #[test]
    fn first_of_duplicate_headers_counts() {
        let binding = table(&[("a", s("1"))]);
        assert!(matches(&binding, &table(&[("b", s("0")), ("a", s("1")), ("a", s("2"))])));
        assert!(!matches(&binding, &table(&[("a", s("2")), ("a", s("1"))])));
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
