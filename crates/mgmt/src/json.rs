//! AMQP field tables and message properties as the management API's JSON shows them.

use hourglass_wire::{
    BasicProperties, FieldArray, FieldTable, FieldValue, LongStr, ShortStr, MAX_NESTING_DEPTH,
};
use serde_json::{Map, Number, Value};

/// A field table as a JSON object (wire order kept).
pub fn table_to_json(table: &FieldTable) -> Value {
    let mut map = Map::new();
    for (key, value) in table.iter() {
        map.insert(key.as_str().into_owned(), value_to_json(&value));
    }
    Value::Object(map)
}

pub fn value_to_json(value: &FieldValue) -> Value {
    match value {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::F32(f) => float(f64::from(*f)),
        FieldValue::F64(f) => float(*f),
        FieldValue::Decimal { scale, value } => float(f64::from(*value) / 10f64.powi(i32::from(*scale))),
        FieldValue::LongStr(s) => Value::String(s.as_str().into_owned()),
        FieldValue::ByteArray(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        FieldValue::Array(items) => Value::Array(items.iter().map(|v| value_to_json(&v)).collect()),
        FieldValue::Timestamp(t) => Value::Number(Number::from(*t)),
        FieldValue::Table(t) => table_to_json(t),
        FieldValue::Void => Value::Null,
        other => other.as_i64().map_or(Value::Null, |i| Value::Number(Number::from(i))),
    }
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Deepest nesting of JSON objects and arrays accepted as a field table (the outermost object is
/// level 1): the AMQP decoder's limit, so that whatever the API accepts is something a client
/// could have sent over AMQP, and decodes wherever the broker reads it back — the definitions
/// snapshot at the next start, a stored message's headers (issue 12). RabbitMQ's API takes
/// deeper tables; ours answers 400 naming the limit.
pub const TABLE_DEPTH_MAX: usize = MAX_NESTING_DEPTH;

/// A JSON object as a field table, typed as RabbitMQ's management plugin does: integers as
/// long, other numbers as double, strings as longstr. Anything but an object (or null) is refused,
/// and so is nesting deeper than [`TABLE_DEPTH_MAX`].
pub fn json_to_table(value: &Value) -> Result<FieldTable, String> {
    table_at(value, 1)
}

/// The table at nesting `level`.
fn table_at(value: &Value, level: usize) -> Result<FieldTable, String> {
    match value {
        Value::Null => Ok(FieldTable::new()),
        Value::Object(map) => {
            let mut entries = Vec::with_capacity(map.len());
            for (key, value) in map {
                if key.len() > 255 {
                    return Err(format!("argument name too long: {key}"));
                }
                entries.push((key.as_str(), value_at(value, level)?));
            }
            Ok(FieldTable::from_entries(entries))
        }
        _ => Err("arguments must be a JSON object".to_owned()),
    }
}

/// A value inside a container at nesting `level`; a nested object or array sits one level deeper.
fn value_at(value: &Value, level: usize) -> Result<FieldValue, String> {
    let deeper = || {
        if level >= TABLE_DEPTH_MAX {
            Err(format!(
                "field table nested deeper than {TABLE_DEPTH_MAX} levels (the AMQP 0-9-1 limit for \
                 arguments and headers)"
            ))
        } else {
            Ok(level + 1)
        }
    };
    Ok(match value {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::I64(i),
            None => FieldValue::F64(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => FieldValue::LongStr(LongStr::from(s.as_str())),
        Value::Array(items) => {
            let level = deeper()?;
            let values = items.iter().map(|v| value_at(v, level)).collect::<Result<Vec<_>, _>>()?;
            FieldValue::Array(FieldArray::from_values(values))
        }
        Value::Object(_) => FieldValue::Table(table_at(value, deeper()?)?),
    })
}

/// Message properties as RabbitMQ's `…/get` shows them: only the ones present.
pub fn properties_to_json(p: &BasicProperties) -> Value {
    let mut map = Map::new();
    let mut put_str = |name: &str, v: &Option<ShortStr>| {
        if let Some(v) = v {
            map.insert(name.to_owned(), Value::String(v.as_str().into_owned()));
        }
    };
    put_str("content_type", &p.content_type);
    put_str("content_encoding", &p.content_encoding);
    put_str("correlation_id", &p.correlation_id);
    put_str("reply_to", &p.reply_to);
    put_str("expiration", &p.expiration);
    put_str("message_id", &p.message_id);
    put_str("type", &p.kind);
    put_str("user_id", &p.user_id);
    put_str("app_id", &p.app_id);
    put_str("cluster_id", &p.cluster_id);
    if let Some(h) = &p.headers {
        map.insert("headers".into(), table_to_json(h));
    }
    if let Some(d) = p.delivery_mode {
        map.insert("delivery_mode".into(), Value::from(d));
    }
    if let Some(pr) = p.priority {
        map.insert("priority".into(), Value::from(pr));
    }
    if let Some(t) = p.timestamp {
        map.insert("timestamp".into(), Value::from(t));
    }
    Value::Object(map)
}

/// Properties from a publish request's `properties` object; unknown keys are refused.
pub fn json_to_properties(value: &Value) -> Result<BasicProperties, String> {
    let mut p = BasicProperties::default();
    let map = match value {
        Value::Null => return Ok(p),
        Value::Object(map) => map,
        _ => return Err("properties must be a JSON object".to_owned()),
    };
    for (key, v) in map {
        let short = || -> Result<Option<ShortStr>, String> {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(format!("property {key} must be a string")),
            };
            ShortStr::try_from(s).map(Some).map_err(|_| format!("property {key} is too long"))
        };
        let octet = || -> Result<Option<u8>, String> {
            v.as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| format!("property {key} must be an integer 0..255"))
        };
        match key.as_str() {
            "content_type" => p.content_type = short()?,
            "content_encoding" => p.content_encoding = short()?,
            "correlation_id" => p.correlation_id = short()?,
            "reply_to" => p.reply_to = short()?,
            "expiration" => p.expiration = short()?,
            "message_id" => p.message_id = short()?,
            "type" => p.kind = short()?,
            "user_id" => p.user_id = short()?,
            "app_id" => p.app_id = short()?,
            "cluster_id" => p.cluster_id = short()?,
            "delivery_mode" => p.delivery_mode = octet()?,
            "priority" => p.priority = octet()?,
            "timestamp" => {
                p.timestamp =
                    Some(v.as_u64().ok_or_else(|| "property timestamp must be an integer".to_owned())?)
            }
            "headers" => p.headers = Some(json_to_table(v).map_err(|e| format!("property headers: {e}"))?),
            _ => return Err(format!("unknown property {key}")),
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON arguments survive the trip through a field table.
    #[test]
    fn arguments_round_trip() {
        let json = serde_json::json!({"x-message-ttl": 1000, "x-dead-letter-exchange": "dlx", "f": 1.5,
            "b": true, "l": [1, "a"], "t": {"k": null}});
        let table = json_to_table(&json).unwrap();
        assert_eq!(table_to_json(&table), json);
        assert!(json_to_table(&serde_json::json!([1])).is_err());
    }

    /// Publish properties parse, and bad ones are refused rather than panicking.
    #[test]
    fn properties_parse() {
        let p = json_to_properties(&serde_json::json!({"delivery_mode": 2, "headers": {"a": 1}})).unwrap();
        assert_eq!(p.delivery_mode, Some(2));
        assert_eq!(properties_to_json(&p), serde_json::json!({"delivery_mode": 2, "headers": {"a": 1}}));
        assert!(json_to_properties(&serde_json::json!({"delivery_mode": 300})).is_err());
        assert!(json_to_properties(&serde_json::json!({"bogus": 1})).is_err());
    }

    /// `depth` nested objects (the outermost is level 1), the innermost `{"leaf": 1}`; or the
    /// innermost level an array.
    fn nested(depth: usize, innermost_array: bool) -> serde_json::Value {
        let mut value = if innermost_array { serde_json::json!([1]) } else { serde_json::json!({"leaf": 1}) };
        for _ in 1..depth {
            value = serde_json::json!({ "x-deep": value });
        }
        value
    }

    /// Issue 12: a table as deep as the AMQP decoder accepts converts, and the converted table
    /// decodes; one level more (an object or an array) is refused naming the limit.
    #[test]
    fn tables_deeper_than_the_amqp_limit_are_refused() {
        for innermost_array in [false, true] {
            let table = json_to_table(&nested(TABLE_DEPTH_MAX, innermost_array)).unwrap();
            assert!(FieldTable::from_raw(table.raw().clone()).is_ok());
            let refused = json_to_table(&nested(TABLE_DEPTH_MAX + 1, innermost_array)).unwrap_err();
            assert!(refused.contains("deeper than 32"), "{refused}");
        }
        let headers = serde_json::json!({"headers": nested(TABLE_DEPTH_MAX + 1, false)});
        assert!(json_to_properties(&headers).unwrap_err().starts_with("property headers: "));
        let long_key = "k".repeat(256);
        assert!(json_to_table(&serde_json::json!({"a": {long_key: 1}})).is_err(), "nested keys checked too");
    }
}
