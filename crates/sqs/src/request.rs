//! A JSON request's parameters, read with SQS's checks: required ones named when missing,
//! numbers kept in their ranges, lists bounded.

use serde_json::{Map, Value};

use crate::error::SqsError;

/// The most entries a list parameter may hold (batches have their own limit of 10; attribute
/// name lists are short): a bound on the work a request can ask for.
const LIST_LEN_MAX: usize = 100;

/// A request's top-level object.
pub struct Input<'a> {
    fields: &'a Map<String, Value>,
}

impl<'a> Input<'a> {
    pub fn new(value: &'a Value) -> Result<Self, SqsError> {
        value
            .as_object()
            .map(|fields| Input { fields })
            .ok_or_else(|| SqsError::SerializationException("the request must be a JSON object".into()))
    }

    pub fn value(&self, name: &str) -> Option<&'a Value> {
        self.fields.get(name).filter(|v| !v.is_null())
    }

    pub fn string(&self, name: &str) -> Result<Option<&'a str>, SqsError> {
        match self.value(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(SqsError::InvalidParameterValue(format!("{name} must be a string."))),
        }
    }

    pub fn required(&self, name: &'static str) -> Result<&'a str, SqsError> {
        self.string(name)?.ok_or(SqsError::MissingParameter(name))
    }

    /// An integer in `range`; the SDKs send numbers, the AWS CLI sometimes strings of digits.
    pub fn integer(&self, name: &str, range: std::ops::RangeInclusive<i64>) -> Result<Option<i64>, SqsError> {
        let Some(value) = self.value(name) else { return Ok(None) };
        let number = match value {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        };
        match number {
            Some(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(SqsError::InvalidParameterValue(format!(
                "Value {value} for parameter {name} is invalid. Reason: must be between {} and {}.",
                range.start(),
                range.end()
            ))),
        }
    }

    /// A list of strings (at most [`LIST_LEN_MAX`]).
    pub fn strings(&self, name: &str) -> Result<Vec<String>, SqsError> {
        let Some(value) = self.value(name) else { return Ok(Vec::new()) };
        let list = value.as_array().filter(|l| l.len() <= LIST_LEN_MAX).ok_or_else(|| {
            SqsError::InvalidParameterValue(format!(
                "{name} must be a list of at most {LIST_LEN_MAX} strings."
            ))
        })?;
        list.iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| SqsError::InvalidParameterValue(format!("{name} must be a list of strings.")))
    }

    /// A map of strings to strings (queue attributes, tags).
    pub fn string_map(&self, name: &str) -> Result<Vec<(String, String)>, SqsError> {
        let Some(value) = self.value(name) else { return Ok(Vec::new()) };
        let map = value.as_object().filter(|m| m.len() <= LIST_LEN_MAX).ok_or_else(|| {
            SqsError::InvalidParameterValue(format!(
                "{name} must be a map of at most {LIST_LEN_MAX} entries."
            ))
        })?;
        map.iter()
            .map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| SqsError::InvalidParameterValue(format!("{name} must map names to strings.")))
    }

    /// A batch's entries, of type `entry` (`SendMessageBatchRequestEntry`…, what an empty
    /// batch's error names): 1 to 10 objects with distinct, well-formed `Id`s.
    pub fn batch(&self, entry: &'static str) -> Result<Vec<(String, Input<'a>)>, SqsError> {
        let entries =
            self.value("Entries").and_then(Value::as_array).ok_or(SqsError::EmptyBatchRequest(entry))?;
        if entries.is_empty() {
            return Err(SqsError::EmptyBatchRequest(entry));
        }
        if entries.len() > 10 {
            return Err(SqsError::TooManyEntriesInBatchRequest(entries.len()));
        }
        let mut out: Vec<(String, Input<'a>)> = Vec::with_capacity(entries.len());
        for entry in entries {
            let entry = Input::new(entry)?;
            let id = entry.required("Id")?;
            let valid = (1..=80).contains(&id.len())
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                return Err(SqsError::InvalidBatchEntryId);
            }
            if out.iter().any(|(seen, _)| seen == id) {
                return Err(SqsError::BatchEntryIdsNotDistinct(id.to_owned()));
            }
            out.push((id.to_owned(), entry));
        }
        Ok(out)
    }
}
