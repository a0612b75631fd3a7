//! Message system attributes a sender sets (issue 40, item 13): AWS defines one, `AWSTraceHeader`
//! (an X-Ray trace header, of type `String`), which a send's `MessageSystemAttributes` carries
//! and a receive returns among the message's `Attributes`. It travels as the AMQP header
//! [`TRACE_HEADER`] (an `x-` header, so never a message attribute), and a send answers the MD5
//! of what it set as `MD5OfMessageSystemAttributes`, computed as for message attributes.

use hourglass_wire::{FieldTable, FieldValue, LongStr};
use serde_json::Value;

use crate::attributes::{self, Attribute, AttributeValue, Attributes};
use crate::error::SqsError;

/// The AMQP header that carries a message's `AWSTraceHeader`.
pub const TRACE_HEADER: &str = "x-sqs-aws-trace-header";
/// The one system attribute a sender may set.
pub const AWS_TRACE_HEADER: &str = "AWSTraceHeader";
/// The longest trace header kept: X-Ray's are about 100 bytes; a bound on what a sender adds.
const TRACE_HEADER_BYTES_MAX: usize = 1_024;

/// A send's `MessageSystemAttributes`, checked: at most `AWSTraceHeader`, a `String`.
pub fn from_json(value: Option<&Value>) -> Result<Attributes, SqsError> {
    let mut out = Attributes::new();
    let Some(value) = value else { return Ok(out) };
    let invalid = |why: String| SqsError::InvalidParameterValue(why);
    let map = value.as_object().ok_or_else(|| invalid("MessageSystemAttributes must be a map".into()))?;
    for (name, attribute) in map {
        if name != AWS_TRACE_HEADER {
            return Err(invalid(format!("Message system attribute name '{name}' is invalid.")));
        }
        let data_type = attribute.get("DataType").and_then(Value::as_str);
        let text = attribute.get("StringValue").and_then(Value::as_str);
        let (Some("String"), Some(text)) = (data_type, text) else {
            return Err(invalid(format!("Message system attribute '{name}' must be of type String.")));
        };
        if text.is_empty() || text.len() > TRACE_HEADER_BYTES_MAX {
            return Err(invalid(format!(
                "Message system attribute '{name}' must be 1 to {TRACE_HEADER_BYTES_MAX} bytes."
            )));
        }
        let value = AttributeValue::String(text.to_owned());
        out.insert(name.clone(), Attribute { data_type: "String".into(), value });
    }
    Ok(out)
}

/// The AMQP headers that carry `system`.
pub fn to_headers(system: &Attributes) -> Vec<(String, FieldValue)> {
    system
        .get(AWS_TRACE_HEADER)
        .and_then(|a| match &a.value {
            AttributeValue::String(text) => Some(text.clone()),
            AttributeValue::Binary(_) => None,
        })
        .map(|text| (TRACE_HEADER.to_owned(), FieldValue::LongStr(LongStr::from(text))))
        .into_iter()
        .collect()
}

/// `MD5OfMessageSystemAttributes` of what a send set (none: nothing set).
pub fn md5(system: &Attributes) -> Option<String> {
    attributes::md5_of_attributes(system)
}

/// The trace header a message carries, for a receive's `Attributes`.
pub fn trace_header(headers: Option<&FieldTable>) -> Option<String> {
    match headers?.get(TRACE_HEADER)? {
        FieldValue::LongStr(text) => Some(text.as_str().into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An `AWSTraceHeader` of type String is taken and round-trips through its AMQP header;
    /// another name, another type or an oversized value is refused.
    #[test]
    fn only_a_string_aws_trace_header_is_taken() {
        let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1";
        let sent = json!({"AWSTraceHeader": {"DataType": "String", "StringValue": trace}});
        let system = from_json(Some(&sent)).unwrap();
        let headers = FieldTable::from_entries(to_headers(&system));
        assert_eq!(trace_header(Some(&headers)).as_deref(), Some(trace));
        assert_eq!(md5(&system).map(|m| m.len()), Some(32));
        for bad in [
            json!({"Other": {"DataType": "String", "StringValue": "x"}}),
            json!({"AWSTraceHeader": {"DataType": "Number", "StringValue": "1"}}),
            json!({"AWSTraceHeader": {"DataType": "String", "StringValue": "x".repeat(1_025)}}),
        ] {
            assert!(matches!(from_json(Some(&bad)), Err(SqsError::InvalidParameterValue(_))), "{bad}");
        }
        assert!(md5(&Attributes::new()).is_none());
    }
}
