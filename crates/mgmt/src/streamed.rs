//! Full listings written while they are read, and a cap on how many run at once (issue 22: one
//! `GET /api/queues` over 100,000 queues built 128 MiB of JSON, and a JSON tree many times that,
//! before the first byte went out: the broker went from 166 MB to 1.9 GB, and three at a time
//! from a user without permissions to 5.3 GB).
//!
//! - [`json_array_in_slices`] asks the broker for one slice of a listing's rows at a time, and
//!   renders them one at a time on a blocking thread into chunks of [`CHUNK_BYTES`], handed to
//!   the response through a channel of [`CHUNKS_QUEUED`]: a listing holds its keys, one slice of
//!   rows and a few chunks, whatever the number of rows; a client that reads slowly slows the
//!   reading and rendering, not the memory.
//! - [`ListingSlots`]: at most [`LISTINGS_MAX`] heavy listings render at once, and at most
//!   [`LISTINGS_PER_USER_MAX`] of them for one user; a user past that gets 429 at once, others
//!   wait for a slot.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hourglass_broker::admin::slices;
use hourglass_broker::requests::Listing;
use http_body::Frame;
use serde_json::Value;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::handle::BrokerHandle;

/// Bytes rendered before a chunk goes to the response: large enough that a chunk's overhead
/// (a channel send, a write) is small beside it, small enough that queued chunks cost little.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks that may wait for a slow client: with [`CHUNK_BYTES`], 256 KiB per listing.
pub const CHUNKS_QUEUED: usize = 4;
/// Heavy listings rendering at once, all users together: two cores' worth of rendering, and
/// room for an operator's while a dashboard polls.
pub const LISTINGS_MAX: usize = 4;
/// Heavy listings one user may have in flight: a dashboard and a script, not a loop of them.
pub const LISTINGS_PER_USER_MAX: usize = 2;

/// A response body fed by a channel of chunks; an error ends the response unfinished, so a
/// client never takes a cut listing for a whole one.
struct ChannelBody {
    chunks: mpsc::Receiver<Result<Bytes, io::Error>>,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.chunks.poll_recv(cx).map(|chunk| chunk.map(|bytes| bytes.map(Frame::data)))
    }
}

/// The client stopped reading (or the response was dropped): rendering stops.
struct ClientGone;

/// A JSON array written item by item into chunks of [`CHUNK_BYTES`], each sent to the response
/// as it fills; a send waits while [`CHUNKS_QUEUED`] are queued, so it runs on a blocking thread.
struct ArrayWriter {
    sender: mpsc::Sender<Result<Bytes, io::Error>>,
    columns: Vec<String>,
    chunk: Vec<u8>,
    items: usize,
}

impl ArrayWriter {
    fn new(sender: mpsc::Sender<Result<Bytes, io::Error>>, columns: Vec<String>) -> Self {
        let mut chunk = new_chunk();
        chunk.push(b'[');
        ArrayWriter { sender, columns, chunk, items: 0 }
    }

    /// Appends `item` (only the `columns` asked for, if any).
    fn push(&mut self, item: Value) -> Result<(), ClientGone> {
        if self.items > 0 {
            self.chunk.push(b',');
        }
        self.items += 1;
        let item = if self.columns.is_empty() {
            item
        } else {
            let columns: Vec<&str> = self.columns.iter().map(String::as_str).collect();
            crate::listing::select(&item, &columns)
        };
        // Writing a Value into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.chunk, &item);
        if self.chunk.len() < CHUNK_BYTES {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.chunk, new_chunk());
        self.sender.blocking_send(Ok(Bytes::from(full))).map_err(|_| ClientGone)
    }

    /// Closes the array and sends the rest.
    fn finish(mut self) {
        self.chunk.push(b']');
        let _ = self.sender.blocking_send(Ok(Bytes::from(self.chunk)));
    }

    /// Ends the response unfinished.
    fn fail(self, reason: &ApiError) {
        let _ = self.sender.blocking_send(Err(io::Error::other(reason.to_string())));
    }
}

/// The response that [`ArrayWriter`]s fed by `write` fill, `write` running on a blocking thread.
fn streamed_response(columns: Vec<String>, write: impl FnOnce(ArrayWriter) + Send + 'static) -> Response {
    let (sender, chunks) = mpsc::channel(CHUNKS_QUEUED);
    tokio::task::spawn_blocking(move || write(ArrayWriter::new(sender, columns)));
    let mut response = Body::new(ChannelBody { chunks }).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON array of `render(row)` for the rows of every key, in order, where each slice's rows
/// are asked of the broker only when the one before is written: a listing holds its keys, one
/// slice of rows and a few chunks, however many rows it lists (issue 22). A key whose object
/// went away meanwhile is left out. If the broker stops answering, the response ends unfinished.
pub fn json_array_in_slices<L: Listing>(
    broker: BrokerHandle,
    keys: Vec<L::Key>,
    render: impl Fn(&L::Row) -> Value + Send + 'static,
    columns: Vec<String>,
    slot: ListingSlot,
) -> Response {
    let runtime = tokio::runtime::Handle::current();
    streamed_response(columns, move |mut writer| {
        let _slot = slot;
        for slice in slices::slices(keys) {
            let slice_rows = match runtime.block_on(broker.rows_of::<L>(slice)) {
                Ok(slice_rows) => slice_rows,
                Err(e) => return writer.fail(&e),
            };
            for row in &slice_rows {
                if writer.push(render(row)).is_err() {
                    return;
                }
            }
        }
        writer.finish();
    })
}

/// A JSON document built whole (a definitions export) sent in chunks of [`CHUNK_BYTES`],
/// holding `slot` until the last chunk is taken or the client goes: the document counts against
/// the heavy listings for as long as it is in memory, so stalled readers cannot pile copies up
/// (issue 37: 50 stalled exports of 20,000 queues held 2.2 GB).
pub fn json_document(document: &Value, slot: ListingSlot) -> Response {
    // Writing a Value into a Vec cannot fail.
    let bytes = Bytes::from(serde_json::to_vec(document).unwrap_or_default());
    let body = DocumentBody { bytes, _slot: slot };
    let mut response = Body::new(body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The rest of a document to send, and the slot it holds meanwhile.
struct DocumentBody {
    bytes: Bytes,
    _slot: ListingSlot,
}

impl http_body::Body for DocumentBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if self.bytes.is_empty() {
            return Poll::Ready(None);
        }
        let take = self.bytes.len().min(CHUNK_BYTES);
        Poll::Ready(Some(Ok(Frame::data(self.bytes.split_to(take)))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.bytes.len() as u64)
    }
}

/// An empty chunk with room for [`CHUNK_BYTES`] and the item that takes it past them.
fn new_chunk() -> Vec<u8> {
    Vec::with_capacity(CHUNK_BYTES + CHUNK_BYTES / 4)
}

/// The cap on heavy listings (module doc). One per API.
#[derive(Debug)]
pub struct ListingSlots {
    overall: Arc<Semaphore>,
    per_user: Arc<Mutex<HashMap<String, usize>>>,
}

impl Default for ListingSlots {
    fn default() -> Self {
        ListingSlots { overall: Arc::new(Semaphore::new(LISTINGS_MAX)), per_user: Arc::default() }
    }
}

/// One heavy listing's place; freed when dropped.
#[derive(Debug)]
pub struct ListingSlot {
    _overall: OwnedSemaphorePermit,
    _count: UserCount,
}

/// One of a user's listings in flight, counted until dropped (also while its slot is awaited,
/// so a cancelled wait gives the count back).
#[derive(Debug)]
struct UserCount {
    user: String,
    per_user: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for UserCount {
    fn drop(&mut self) {
        release(&self.per_user, &self.user);
    }
}

impl ListingSlots {
    /// A slot for `user`: 429 at once when the user has [`LISTINGS_PER_USER_MAX`] in flight,
    /// otherwise a wait for one of the [`LISTINGS_MAX`].
    pub async fn take(&self, user: &str) -> Result<ListingSlot, ApiError> {
        {
            let mut per_user = lock(&self.per_user);
            let count = per_user.entry(user.to_owned()).or_insert(0);
            if *count >= LISTINGS_PER_USER_MAX {
                return Err(ApiError::TooManyListings);
            }
            *count += 1;
        }
        let count = UserCount { user: user.to_owned(), per_user: self.per_user.clone() };
        let overall =
            self.overall.clone().acquire_owned().await.map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(ListingSlot { _overall: overall, _count: count })
    }
}

fn release(per_user: &Mutex<HashMap<String, usize>>, user: &str) {
    let mut per_user = lock(per_user);
    if let Some(count) = per_user.get_mut(user) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            per_user.remove(user);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain counts: a panic elsewhere cannot leave them half-written.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use axum::http::StatusCode;
    use hourglass_broker::queue::{QueueId, QueueStats};
    use hourglass_broker::requests::{AsUser, DeclareQueue, ListingKeys, QueueStatsListing};
    use hourglass_broker::Permissions;
    use hourglass_wire::{QueueDeclare, ShortStr};
    use serde_json::json;

    use super::*;

    /// A broker with queues `q0000`, `q0001`, … (`count` of them), and their keys in order.
    async fn broker_with_queues(count: usize) -> (BrokerHandle, Vec<QueueId>) {
        let broker = BrokerHandle::standalone();
        for i in 0..count {
            let who = AsUser { user: "guest".into(), vhost: "/".into(), permissions: Permissions::full() };
            let declare =
                QueueDeclare { queue: ShortStr::try_from(format!("q{i:04}")).unwrap(), ..Default::default() };
            broker.request(DeclareQueue { who, declare }).await.unwrap().unwrap();
        }
        let mut keys = broker.ask(ListingKeys(QueueStatsListing { vhost: None })).await.unwrap();
        // Ids count up as queues are made.
        keys.sort_unstable_by_key(|key| key.0);
        (broker, keys)
    }

    /// A listing larger than many chunks and slices arrives whole and in order, exactly the
    /// JSON array of its items; `columns` trims each item.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_streamed_listing_is_the_whole_json_array() {
        let (broker, keys) = broker_with_queues(2_500).await;
        assert_eq!(keys.len(), 2_500);
        let render = |q: &QueueStats| json!({"name": q.name, "vhost": q.vhost, "pad": "x".repeat(300)});
        let expected: Vec<Value> = (0..2_500)
            .map(|i| json!({"name": format!("q{i:04}"), "vhost": "/", "pad": "x".repeat(300)}))
            .collect();
        let slots = ListingSlots::default();
        let slot = slots.take("guest").await.unwrap();
        let response =
            json_array_in_slices::<QueueStatsListing>(broker.clone(), keys.clone(), render, vec![], slot);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert!(bytes.len() > 10 * CHUNK_BYTES);
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), Value::Array(expected));

        let slot = slots.take("guest").await.unwrap();
        let response = json_array_in_slices::<QueueStatsListing>(
            broker,
            vec![keys[7]],
            render,
            vec!["name".into()],
            slot,
        );
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), json!([{"name": "q0007"}]));
    }

    /// A user gets at most two listings at once (the third is 429), others are not held back
    /// by it, and a finished listing gives its slot back.
    #[tokio::test]
    async fn listings_are_capped_per_user() {
        let slots = ListingSlots::default();
        let first = slots.take("bob").await.unwrap();
        let _second = slots.take("bob").await.unwrap();
        let refused = slots.take("bob").await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let _other = slots.take("alice").await.unwrap();
        drop(first);
        assert!(slots.take("bob").await.is_ok());
    }

    /// Past the overall cap a listing waits for a slot; a wait given up returns the user's count.
    #[tokio::test]
    async fn past_the_overall_cap_a_listing_waits() {
        let slots = ListingSlots::default();
        let held: Vec<ListingSlot> = take_many(&slots, LISTINGS_MAX).await;
        let mut waiting = Box::pin(slots.take("late"));
        let pending = std::future::poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx).is_pending())).await;
        assert!(pending, "no slot while {LISTINGS_MAX} are held");
        drop(waiting);
        assert!(lock(&slots.per_user).get("late").is_none(), "the given-up wait was uncounted");
        drop(held);
        assert!(slots.take("late").await.is_ok());
    }

    async fn take_many(slots: &ListingSlots, count: usize) -> Vec<ListingSlot> {
        let mut held = Vec::new();
        for i in 0..count {
            held.push(slots.take(&format!("user{i}")).await.unwrap());
        }
        held
    }
}
