//! The query parameters every list endpoint takes: `columns`, `sort`, `sort_reverse`, `name`
//! (a substring filter), `page`, `page_size` — and the paginated shape when `page` is given.

use std::collections::HashMap;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};

use hourglass_broker::admin::slices::{self};
use hourglass_broker::requests::{KeyedRows, Listing};
use hourglass_wire::ShortStr;

use crate::error::ApiError;
use crate::handle::BrokerHandle;
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

/// How a listing sorted on a key other than the names reads that key from a row without
/// rendering it (`messages` from a queue's counts); keys without one render each row.
pub type SortValue<R> = (&'static str, fn(&R) -> Value);

/// An order a listing's rows take from their names alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameOrder {
    /// The listing's own order (no `sort`), and `sort=vhost`.
    VhostThenName,
    /// `sort=name`: by name, then by vhost (as a stable sort by name of the listing's own order).
    NameThenVhost,
}

impl NameOrder {
    /// The order `params` asks for, when names alone give it; `None` for a sort on anything else.
    pub fn asked(params: &Params) -> Option<NameOrder> {
        match params.get("sort").map(String::as_str) {
            None | Some("") | Some("vhost") => Some(NameOrder::VhostThenName),
            Some("name") => Some(NameOrder::NameThenVhost),
            Some(_) => None,
        }
    }
}

/// The keys of one vhost's rows by the rows' names.
pub type NamedKeys<K> = (String, Vec<(ShortStr, K)>);

/// The keys of the rows the `name` filter keeps, in `order`, and the number of rows before the
/// filter. The names are dropped here: a listing then holds a key per row (8 bytes for a
/// queue), not the row.
pub fn ordered_keys<K: Copy>(
    groups: Vec<NamedKeys<K>>,
    order: NameOrder,
    params: &Params,
) -> (Vec<K>, usize) {
    let total_count = groups.iter().map(|(_, keys)| keys.len()).sum();
    let filter = name_filter(params);
    let mut named: Vec<(&str, &ShortStr, K)> = Vec::with_capacity(total_count);
    for (vhost, keys) in &groups {
        for (name, key) in keys {
            if filter.is_none_or(|f| name.as_str().contains(f)) {
                named.push((vhost.as_str(), name, *key));
            }
        }
    }
    match order {
        NameOrder::VhostThenName => named.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1))),
        NameOrder::NameThenVhost => named.sort_unstable_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0))),
    }
    (named.into_iter().map(|(_, _, key)| key).collect(), total_count)
}

/// The sort field's value as the listing sorts by it: a scalar as it is, a missing field as
/// `None`, and an object or array (which sorts as equal to anything present) as an empty array,
/// so a key holds at most a scalar.
fn sort_field(item: &Value, path: &str) -> Option<Value> {
    lookup(item, path).map(|v| match v {
        Value::Array(_) | Value::Object(_) => Value::Array(Vec::new()),
        scalar => scalar.clone(),
    })
}

/// `keyed` (in the listing's own order) stably sorted by their values, as [`respond`] sorts
/// rendered rows.
pub fn sort_by_values<K>(mut keyed: Vec<(K, Option<Value>)>) -> Vec<K> {
    keyed.sort_by(|a, b| compare(a.1.as_ref(), b.1.as_ref()));
    keyed.into_iter().map(|(key, _)| key).collect()
}

/// How a listing's row is shown.
pub type Render<R> = Arc<dyn Fn(&R) -> Value + Send + Sync>;

/// What a listing whose keys are named ([`NamedKeys`]) needs to show its rows.
pub struct KeyedListing<L: Listing> {
    /// A row as the API shows it.
    pub render: Render<L::Row>,
    /// Sort keys read from a row without rendering it.
    pub values: &'static [SortValue<L::Row>],
}

/// A listing of named keys (issue 22: one that held every row of 100,000 queues cost 2.2 KB per
/// queue, and a sort on a field the rows did not know rendered all of them into one tree): the
/// keys are filtered by name and sorted — by the names, or by each row's sort field read slice
/// by slice and kept beside its key — then paged, and rows are asked of the broker only for what
/// is shown: a page's in one job, a full listing's slice by slice as its JSON is written
/// (`streamed::json_array_in_slices`). So a listing holds a key (and a sort value) per row, not
/// a row. Rows that went away meanwhile are left out.
pub async fn respond_keyed<L>(
    broker: &BrokerHandle,
    groups: Vec<NamedKeys<L::Key>>,
    params: &Params,
    listing: KeyedListing<L>,
    slot: ListingSlot,
) -> Result<Response, ApiError>
where
    L: Listing,
    L::Key: Copy,
{
    let asked = params.clone();
    let order = NameOrder::asked(params);
    let by_names = order.unwrap_or(NameOrder::VhostThenName);
    let (mut keys, total_count) = off_workers(move || ordered_keys(groups, by_names, &asked)).await?;
    if order.is_none() {
        keys = sorted_by_field(broker, keys, params, &listing).await?;
    }
    if sort_reverse(params) {
        keys.reverse();
    }
    let KeyedListing { render, .. } = listing;
    let Some(page) = page_of(params, keys.len())? else {
        let render = move |row: &L::Row| render(row);
        return Ok(streamed::json_array_in_slices::<L>(broker.clone(), keys, render, columns(params), slot));
    };
    let filtered_count = keys.len();
    let shown: Vec<L::Key> = keys.into_iter().skip(page.skip()).take(page.size).collect();
    let items: Vec<Value> = broker.rows_of::<L>(shown).await?.iter().map(|row| render(row)).collect();
    Ok(page.response(trim(items, params), filtered_count, total_count))
}

/// `keys` stably sorted by the `sort` field of their rows, read a slice of rows at a time (and
/// rendered, off the runtime's workers, unless `listing.values` reads the field directly).
async fn sorted_by_field<L>(
    broker: &BrokerHandle,
    keys: Vec<L::Key>,
    params: &Params,
    listing: &KeyedListing<L>,
) -> Result<Vec<L::Key>, ApiError>
where
    L: Listing,
    L::Key: Copy,
{
    let field = params.get("sort").cloned().unwrap_or_default();
    let direct = listing.values.iter().find(|(name, _)| *name == field).map(|(_, value)| *value);
    let mut keyed = Vec::with_capacity(keys.len());
    for slice in slices::slices(keys) {
        let slice_rows = broker.ask(KeyedRows::<L>::of(slice)).await?;
        let (render, field) = (listing.render.clone(), field.clone());
        keyed.extend(
            off_workers(move || {
                let value = |row: &L::Row| match direct {
                    Some(value) => Some(value(row)),
                    None => sort_field(&render(row), &field),
                };
                slice_rows.iter().map(|(key, row)| (*key, value(row))).collect::<Vec<_>>()
            })
            .await?,
        );
    }
    Ok(sort_by_values(keyed))
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

/// Whether `params` ask for every item in the listing's own order (no filter, sort or page): a
/// listing that can be written as its rows are read.
pub fn whole_in_own_order(params: &Params) -> bool {
    name_filter(params).is_none()
        && params.get("sort").is_none_or(String::is_empty)
        && !params.contains_key("page")
}

/// The `columns` asked for (none: every field).
pub fn columns(params: &Params) -> Vec<String> {
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
    use super::*;

    struct Row {
        vhost: &'static str,
        name: String,
        messages: u64,
    }

    fn render(row: &Row) -> Value {
        serde_json::json!({"vhost": row.vhost, "name": row.name, "messages": row.messages})
    }

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

    /// Sorting keys by their rows' sort field, read a row at a time (directly or from the
    /// rendered row), gives the rows in exactly the order that sorting the rendered JSON gives,
    /// ties kept in the listing's own order; a missing field sorts first, an object as equal.
    #[tokio::test]
    async fn keys_sorted_by_field_values_match_the_rendered_order() {
        let rows = rows();
        for field in ["messages", "messages", "nested", "absent"] {
            let params = params(&[("sort", field)]);
            let render = |row: &Row| {
                let mut item = render(row);
                if row.messages.is_multiple_of(2) {
                    item["nested"] = serde_json::json!({"rate": row.messages});
                }
                item
            };
            let expected = body(respond(rows.iter().map(render).collect(), &params).unwrap()).await;
            let keyed: Vec<(usize, Option<Value>)> =
                rows.iter().enumerate().map(|(i, row)| (i, sort_field(&render(row), field))).collect();
            let got: Vec<Value> = sort_by_values(keyed).into_iter().map(|i| render(&rows[i])).collect();
            assert_eq!(Value::Array(got), expected, "sort={field}");
        }
    }

    /// Ordering and filtering the keys by names alone (then reversing them, as
    /// `respond_keyed` does) gives the rows in exactly the order that sorting the rendered JSON
    /// gives, for the listing's own order, `sort=name` and `sort=vhost`, reversed or not, with or without the name filter; the total counts every row.
    #[tokio::test]
    async fn keys_ordered_by_names_match_the_rendered_order() {
        let mut unique = rows();
        unique.dedup_by(|a, b| (a.vhost, &a.name) == (b.vhost, &b.name));
        let mut groups: Vec<NamedKeys<usize>> = vec![];
        for (i, row) in unique.iter().enumerate() {
            let name = ShortStr::try_from(row.name.as_str()).unwrap();
            match groups.iter_mut().find(|(vhost, _)| vhost == row.vhost) {
                Some((_, keys)) => keys.insert(0, (name, i)),
                None => groups.insert(0, (row.vhost.to_owned(), vec![(name, i)])),
            }
        }
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("sort", "name")],
            &[("sort", "vhost"), ("sort_reverse", "true")],
            &[("sort", "name"), ("sort_reverse", "true"), ("name", "q1")],
            &[("name", "q1")],
        ];
        for case in cases {
            let params = params(case);
            let order = NameOrder::asked(&params).unwrap();
            let all: Vec<Value> = unique.iter().map(render).collect();
            let expected = body(respond(all, &params).unwrap()).await;
            let (mut keys, total) = ordered_keys(groups.clone(), order, &params);
            if sort_reverse(&params) {
                keys.reverse();
            }
            let got: Vec<Value> = keys.iter().map(|i| render(&unique[*i])).collect();
            assert_eq!(Value::Array(got), expected, "{case:?}");
            assert_eq!(total, unique.len());
        }
        assert_eq!(NameOrder::asked(&params(&[("sort", "messages")])), None);
    }
}
