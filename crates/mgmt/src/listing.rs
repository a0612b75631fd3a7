//! The query parameters every list endpoint takes: `columns`, `sort`, `sort_reverse`, `name`
//! (a substring filter), `page`, `page_size` — and the paginated shape when `page` is given.

use std::collections::HashMap;

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::streamed::{self, ListingSlot};

/// RabbitMQ's largest page.
const PAGE_SIZE_MAX: usize = 500;
const PAGE_SIZE_DEFAULT: usize = 100;

pub type Params = HashMap<String, String>;

/// Runs `work` on a blocking thread: sorting or rendering a whole listing (100,000 rows and more)
/// takes long enough to hold up a runtime worker, and with it the AMQP connections and the
/// broker task it serves (issue 22).
pub async fn off_workers<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| ApiError::internal(e.to_string()))
}

/// Filters, sorts, pages and trims `items` as the query asks.
pub fn respond(mut items: Vec<Value>, params: &Params) -> Result<Response, ApiError> {
    let total_count = items.len();
    if let Some(name) = name_filter(params) {
        items.retain(|item| item.get("name").and_then(Value::as_str).is_some_and(|n| n.contains(name)));
    }
    if let Some(key) = params.get("sort").filter(|k| !k.is_empty()) {
        items.sort_by(|a, b| compare(lookup(a, key), lookup(b, key)));
    }
    if sort_reverse(params) {
        items.reverse();
    }
    let Some(page) = page_of(params, items.len())? else {
        return Ok(Json(trim(items, params)).into_response());
    };
    let filtered_count = items.len();
    let items: Vec<Value> = items.into_iter().skip(page.skip()).take(page.size).collect();
    Ok(page.response(trim(items, params), filtered_count, total_count))
}

/// A sort key that rows know without being rendered, with their order under it.
pub type RowOrder<T> = (&'static str, fn(&T, &T) -> std::cmp::Ordering);

/// [`respond`] for rows not yet rendered to JSON (issue #12, finding 7): the name filter, a sort
/// on one of `orders` and the page are applied to the rows, and only the page is rendered — so
/// `page=1&page_size=1` over 100,000 queues renders one. Without a page the whole listing is
/// written while it is rendered (`streamed::json_array`, issue 22), holding `slot` until done. A
/// sort on any other key renders every row and sorts the JSON, as before. `rows` come in the
/// listing's natural order.
pub fn respond_rows<T: Send + 'static>(
    mut rows: Vec<T>,
    params: &Params,
    name_of: impl Fn(&T) -> &str,
    orders: &[RowOrder<T>],
    render: impl Fn(&T) -> Value + Send + 'static,
    slot: ListingSlot,
) -> Result<Response, ApiError> {
    let order = match params.get("sort").filter(|k| !k.is_empty()) {
        None => None,
        Some(key) => match orders.iter().find(|(name, _)| name == key) {
            Some((_, order)) => Some(*order),
            None => return respond(rows.iter().map(render).collect(), params),
        },
    };
    let total_count = rows.len();
    if let Some(name) = name_filter(params) {
        rows.retain(|row| name_of(row).contains(name));
    }
    if let Some(order) = order {
        rows.sort_by(order);
    }
    if sort_reverse(params) {
        rows.reverse();
    }
    let Some(page) = page_of(params, rows.len())? else {
        return Ok(streamed::json_array(rows, render, columns(params), slot));
    };
    let items: Vec<Value> = rows.iter().skip(page.skip()).take(page.size).map(render).collect();
    Ok(page.response(trim(items, params), rows.len(), total_count))
}

fn name_filter(params: &Params) -> Option<&str> {
    params.get("name").map(String::as_str).filter(|n| !n.is_empty())
}

fn sort_reverse(params: &Params) -> bool {
    params.get("sort_reverse").is_some_and(|v| v == "true")
}

/// Only the `columns` asked for, if any.
fn trim(items: Vec<Value>, params: &Params) -> Vec<Value> {
    let columns = columns(params);
    if columns.is_empty() {
        return items;
    }
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    items.iter().map(|item| select(item, &columns)).collect()
}

/// The `columns` asked for (none: every field).
fn columns(params: &Params) -> Vec<String> {
    params
        .get("columns")
        .map(|c| c.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The page asked for, over `filtered_count` items.
struct Page {
    number: usize,
    size: usize,
    count: usize,
}

impl Page {
    fn skip(&self) -> usize {
        (self.number - 1).saturating_mul(self.size)
    }

    fn response(&self, items: Vec<Value>, filtered_count: usize, total_count: usize) -> Response {
        Json(serde_json::json!({
            "filtered_count": filtered_count,
            "item_count": items.len(),
            "items": items,
            "page": self.number,
            "page_count": self.count,
            "page_size": self.size,
            "total_count": total_count,
        }))
        .into_response()
    }
}

/// `page` and `page_size` checked as RabbitMQ does; `None` when no page is asked for.
fn page_of(params: &Params, filtered_count: usize) -> Result<Option<Page>, ApiError> {
    let Some(page) = params.get("page") else { return Ok(None) };
    let number: usize = page
        .parse()
        .ok()
        .filter(|p| *p >= 1)
        .ok_or_else(|| ApiError::bad_request("page must be a positive integer"))?;
    let size: usize = match params.get("page_size") {
        None => PAGE_SIZE_DEFAULT,
        Some(s) => s.parse().ok().filter(|s| (1..=PAGE_SIZE_MAX).contains(s)).ok_or_else(|| {
            ApiError::bad_request(format!("page_size must be between 1 and {PAGE_SIZE_MAX}"))
        })?,
    };
    let count = filtered_count.div_ceil(size).max(1);
    if number > count {
        return Err(ApiError::bad_request(format!("page {number} out of range: there are {count} pages")));
    }
    Ok(Some(Page { number, size, count }))
}

/// A dotted path (`message_stats.publish`) into an object.
fn lookup<'a>(item: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(item, |v, key| v.get(key))
}

/// Only the named columns, keeping their nesting.
pub(crate) fn select(item: &Value, columns: &[&str]) -> Value {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;

    use super::*;
    use crate::streamed::ListingSlots;

    struct Row {
        vhost: &'static str,
        name: String,
        messages: u64,
    }

    fn render(row: &Row) -> Value {
        serde_json::json!({"vhost": row.vhost, "name": row.name, "messages": row.messages})
    }

    const ORDERS: &[RowOrder<Row>] =
        &[("name", |a, b| a.name.cmp(&b.name)), ("messages", |a, b| a.messages.cmp(&b.messages))];

    /// Rows in the listing's natural order (vhost, name), with names and counts that collide.
    fn rows() -> Vec<Row> {
        let mut rows: Vec<Row> = (0..40u64)
            .map(|i| Row {
                vhost: if i % 3 == 0 { "/" } else { "other" },
                name: format!("q{}", (i * 7) % 13),
                messages: (i * 5) % 4,
            })
            .collect();
        rows.sort_by(|a, b| (a.vhost, &a.name).cmp(&(b.vhost, &b.name)));
        rows
    }

    async fn body(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// Filtering, sorting and paging the rows before rendering gives exactly what rendering
    /// everything and then filtering, sorting and paging the JSON gives (finding 7's fix must not
    /// change a listing), for sort keys the rows know and for others.
    #[tokio::test]
    async fn paging_rows_before_rendering_matches_paging_the_json() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("page", "2"), ("page_size", "7")],
            &[("sort", "name")],
            &[("sort", "name"), ("sort_reverse", "true"), ("page", "3"), ("page_size", "5")],
            &[("sort", "messages"), ("page", "1"), ("page_size", "9"), ("columns", "name,messages")],
            &[("sort", "vhost"), ("name", "q1"), ("page", "1"), ("page_size", "4")],
            &[("name", "q1"), ("sort_reverse", "true")],
            &[("page", "9"), ("page_size", "5")],
        ];
        for case in cases {
            let params = params(case);
            let all: Vec<Value> = rows().iter().map(render).collect();
            let expected = respond(all, &params);
            let slot = ListingSlots::default().take("guest").await.unwrap();
            let got = respond_rows(rows(), &params, |r| r.name.as_str(), ORDERS, render, slot);
            match (expected, got) {
                (Ok(expected), Ok(got)) => assert_eq!(body(got).await, body(expected).await, "{case:?}"),
                (Err(expected), Err(got)) => assert_eq!(got.reason(), expected.reason(), "{case:?}"),
                (expected, got) => panic!("{case:?}: {:?} vs {:?}", expected.is_ok(), got.is_ok()),
            }
        }
    }

    /// A page renders only its own rows (`page_size=1` over 10,000 rows renders one), and only a
    /// sort on a key the rows do not know renders them all.
    #[tokio::test]
    async fn a_page_renders_only_its_rows() {
        let rendered = Arc::new(AtomicUsize::new(0));
        let many =
            || (0..10_000u64).map(|i| Row { vhost: "/", name: format!("q{i:05}"), messages: i }).collect();
        let counting = |rendered: &Arc<AtomicUsize>| {
            let rendered = rendered.clone();
            move |row: &Row| {
                rendered.fetch_add(1, Relaxed);
                render(row)
            }
        };
        let slots = ListingSlots::default();
        let asked = params(&[("page", "1"), ("page_size", "1"), ("sort", "name"), ("sort_reverse", "true")]);
        let slot = slots.take("guest").await.unwrap();
        respond_rows(many(), &asked, |r| r.name.as_str(), ORDERS, counting(&rendered), slot).unwrap();
        assert_eq!(rendered.load(Relaxed), 1);
        rendered.store(0, Relaxed);
        let asked = params(&[("page", "1"), ("page_size", "1"), ("sort", "vhost")]);
        let slot = slots.take("guest").await.unwrap();
        respond_rows(many(), &asked, |r| r.name.as_str(), ORDERS, counting(&rendered), slot).unwrap();
        assert_eq!(rendered.load(Relaxed), 10_000);
    }
}
