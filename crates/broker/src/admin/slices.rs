//! Listings built in slices between other work (issue 22: one `GET /api/queues` over 100,000
//! queues built every row in one command, and a publisher's confirm waited behind it for up to
//! 345 ms).
//!
//! A listing is asked for in two steps, each a job on the broker task: first its keys (ids and
//! names: a few bytes per row, no statistics, no arguments), then the rows of at most
//! [`SLICE_ROWS_MAX`] keys per job ([`slices`]). Commands from AMQP connections run between the
//! jobs. So a listing's rows are from slightly different moments, as RabbitMQ's are (it reads
//! its tables row by row); a row whose object went away between its key and its slice is left
//! out, and an object made meanwhile is not listed. Keys that stand for many rows (an exchange's
//! bindings, a queue's consumers) are split into ranges of at most [`SLICE_ROWS_MAX`] by
//! position: when one of them goes away between two slices of the same exchange or queue, the
//! later positions shift, so one of its other rows can be left out or listed twice.
//!
//! What each listing's keys and rows are: `listing.rs`.

use std::ops::Range;

use hourglass_wire::ShortStr;

use crate::api::{ChannelId, ConnectionId};
use crate::queue::QueueId;

/// Most rows one job builds: a slice of queue rows holds the broker task for about 0.2 ms, the
/// keys of 100,000 queues for 0.6 ms, where the whole listing took 224 ms in one job
/// (`benches/listing_slices.rs`, docs/benchmarks.md) — far under the 50 ms issue 22 allows a
/// confirm to wait, while 100,000 queues still take only 100 round trips to the broker task.
pub const SLICE_ROWS_MAX: usize = 1000;

/// A listing's key: the rows it stands for.
pub trait SliceKey {
    fn rows(&self) -> usize;
}

impl SliceKey for QueueId {
    fn rows(&self) -> usize {
        1
    }
}

impl SliceKey for ConnectionId {
    fn rows(&self) -> usize {
        1
    }
}

impl SliceKey for (ConnectionId, ChannelId) {
    fn rows(&self) -> usize {
        1
    }
}

/// An exchange by vhost and name.
#[derive(Clone, Debug)]
pub struct ExchangeKey {
    pub vhost: String,
    pub name: ShortStr,
}

impl SliceKey for ExchangeKey {
    fn rows(&self) -> usize {
        1
    }
}

/// Some of a queue's consumers, by their place in it.
#[derive(Clone, Debug)]
pub struct ConsumerKey {
    pub queue: QueueId,
    pub range: Range<usize>,
}

impl SliceKey for ConsumerKey {
    fn rows(&self) -> usize {
        self.range.len()
    }
}

/// A queue's implicit binding to the default exchange, or some of an exchange's bindings by
/// their place in it.
#[derive(Clone, Debug)]
pub enum BindingKey {
    Default(QueueId),
    Declared { exchange: ExchangeKey, range: Range<usize> },
}

impl SliceKey for BindingKey {
    fn rows(&self) -> usize {
        match self {
            BindingKey::Default(_) => 1,
            BindingKey::Declared { range, .. } => range.len(),
        }
    }
}

/// `keys` cut in order into slices of at most [`SLICE_ROWS_MAX`] rows each; a key is never
/// split (the listing's keys are ranges of at most that many rows).
pub fn slices<K: SliceKey>(keys: Vec<K>) -> Vec<Vec<K>> {
    let mut out = Vec::new();
    let mut slice = Vec::new();
    let mut rows = 0;
    for key in keys {
        let key_rows = key.rows();
        assert!(key_rows <= SLICE_ROWS_MAX, "a listing key stands for {key_rows} rows");
        if rows + key_rows > SLICE_ROWS_MAX {
            out.push(std::mem::take(&mut slice));
            rows = 0;
        }
        rows += key_rows;
        slice.push(key);
    }
    if !slice.is_empty() {
        out.push(slice);
    }
    out
}

/// `0..count` in consecutive ranges of at most [`SLICE_ROWS_MAX`].
pub(crate) fn ranges(count: usize) -> impl Iterator<Item = Range<usize>> {
    (0..count).step_by(SLICE_ROWS_MAX).map(move |start| start..count.min(start + SLICE_ROWS_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumers(count: usize) -> Vec<ConsumerKey> {
        ranges(count).map(|range| ConsumerKey { queue: QueueId(1), range }).collect()
    }

    /// No slice stands for more than SLICE_ROWS_MAX rows, none is empty, and together they are
    /// every key in order.
    #[test]
    fn slices_hold_at_most_the_slice_rows_and_every_key_once() {
        let mut keys = consumers(2 * SLICE_ROWS_MAX + 7);
        keys.extend((0..5).map(|i| ConsumerKey { queue: QueueId(2), range: i..i + 1 }));
        keys.extend(consumers(SLICE_ROWS_MAX - 1));
        let rows: usize = keys.iter().map(SliceKey::rows).sum();
        let cut = slices(keys.clone());
        for slice in &cut {
            let slice_rows: usize = slice.iter().map(SliceKey::rows).sum();
            assert!((1..=SLICE_ROWS_MAX).contains(&slice_rows), "{slice_rows}");
        }
        assert_eq!(cut.iter().flatten().map(SliceKey::rows).sum::<usize>(), rows);
        let ranges: Vec<_> = cut.into_iter().flatten().map(|k| (k.queue, k.range)).collect();
        assert_eq!(ranges, keys.into_iter().map(|k| (k.queue, k.range)).collect::<Vec<_>>());
    }

    /// A count is covered by ranges of at most SLICE_ROWS_MAX, with none for zero.
    #[test]
    fn ranges_cover_a_count() {
        assert_eq!(ranges(0).count(), 0);
        let cut: Vec<_> = ranges(2 * SLICE_ROWS_MAX + 1).collect();
        assert_eq!(
            cut,
            [
                0..SLICE_ROWS_MAX,
                SLICE_ROWS_MAX..2 * SLICE_ROWS_MAX,
                2 * SLICE_ROWS_MAX..2 * SLICE_ROWS_MAX + 1
            ]
        );
    }
}
