//! The query parameters every list endpoint takes: `columns`, `sort`, `sort_reverse`, `name`
//! (a substring filter), `page`, `page_size` — and the paginated shape when `page` is given.

use std::collections::HashMap;

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// RabbitMQ's largest page.
const PAGE_SIZE_MAX: usize = 500;
const PAGE_SIZE_DEFAULT: usize = 100;

pub type Params = HashMap<String, String>;

/// Filters, sorts, pages and trims `items` as the query asks.
pub fn respond(mut items: Vec<Value>, params: &Params) -> Result<Response, ApiError> {
    let total_count = items.len();
    if let Some(name) = params.get("name").filter(|n| !n.is_empty()) {
        items.retain(|item| {
            item.get("name").and_then(Value::as_str).is_some_and(|n| n.contains(name.as_str()))
        });
    }
    if let Some(key) = params.get("sort").filter(|k| !k.is_empty()) {
        items.sort_by(|a, b| compare(lookup(a, key), lookup(b, key)));
    }
    if params.get("sort_reverse").is_some_and(|v| v == "true") {
        items.reverse();
    }
    let columns: Vec<&str> =
        params.get("columns").map(|c| c.split(',').filter(|c| !c.is_empty()).collect()).unwrap_or_default();
    if !columns.is_empty() {
        items = items.iter().map(|item| select(item, &columns)).collect();
    }
    let Some(page) = params.get("page") else { return Ok(Json(items).into_response()) };
    let page: usize = page
        .parse()
        .ok()
        .filter(|p| *p >= 1)
        .ok_or_else(|| ApiError::bad_request("page must be a positive integer"))?;
    let page_size: usize = match params.get("page_size") {
        None => PAGE_SIZE_DEFAULT,
        Some(s) => s.parse().ok().filter(|s| (1..=PAGE_SIZE_MAX).contains(s)).ok_or_else(|| {
            ApiError::bad_request(format!("page_size must be between 1 and {PAGE_SIZE_MAX}"))
        })?,
    };
    let filtered_count = items.len();
    let page_count = filtered_count.div_ceil(page_size).max(1);
    if page > page_count {
        return Err(ApiError::bad_request(format!("page {page} out of range: there are {page_count} pages")));
    }
    let page_items: Vec<Value> = items.into_iter().skip((page - 1) * page_size).take(page_size).collect();
    Ok(Json(serde_json::json!({
        "filtered_count": filtered_count,
        "item_count": page_items.len(),
        "items": page_items,
        "page": page,
        "page_count": page_count,
        "page_size": page_size,
        "total_count": total_count,
    }))
    .into_response())
}

/// A dotted path (`message_stats.publish`) into an object.
fn lookup<'a>(item: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(item, |v, key| v.get(key))
}

/// Only the named columns, keeping their nesting.
fn select(item: &Value, columns: &[&str]) -> Value {
    let mut out = Value::Object(Map::new());
    for column in columns {
        let Some(value) = lookup(item, column) else { continue };
        let mut at = &mut out;
        let keys: Vec<&str> = column.split('.').collect();
        for key in &keys[..keys.len() - 1] {
            let Value::Object(map) = at else { break };
            at = map.entry((*key).to_owned()).or_insert_with(|| Value::Object(Map::new()));
        }
        if let (Value::Object(map), Some(last)) = (at, keys.last()) {
            map.insert((*last).to_owned(), value.clone());
        }
    }
    out
}

fn compare(a: Option<&Value>, b: Option<&Value>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            x.as_f64().unwrap_or(0.0).partial_cmp(&y.as_f64().unwrap_or(0.0)).unwrap_or(Ordering::Equal)
        }
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}
