//! Reading a stored message back (ADR 0007): the broker keeps only the store location of a
//! message whose body it paged out, and reads the record through a [`MessageSource`] the driver
//! injects when the message is needed (delivery, dead-lettering, a peek). The broker stays
//! sans-IO: the server implements the trait over the store's segment files, tests over a map.

use std::fmt;

use bytes::Bytes;

/// Where a message's record lies in the store (the store's `Location`, as the broker keeps it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordLocation {
    /// Sequence number of the segment file.
    pub segment: u64,
    /// Offset of the record's first byte in the segment.
    pub offset: u32,
    /// The whole record: header, metadata and body.
    pub record_bytes: u32,
}

/// Reads the record stored at a location: the bytes `encode_record` made (exchange, routing key,
/// properties, body), checksum verified. Called from the broker's thread (a restore's records
/// stored without the facts a queue needs, and an SQS FIFO queue's paged messages stored without
/// their group, by a build before metadata version 3), from the driver's blocking threads (the
/// reads of consumers, basic.gets (the HTTP API's too), SQS receives, SQS message-move tasks and
/// dead-lettering, `message_reads.rs`) and from the HTTP API's (its delayed-message listings,
/// `admin/delayed_listing.rs`); keep it a plain positioned read.
pub trait MessageSource: Send + Sync + fmt::Debug {
    fn read(&self, location: RecordLocation) -> Result<Bytes, String>;

    /// `read` for each of `locations`, in order (a store may read records in a row at once).
    fn read_many(&self, locations: &[RecordLocation]) -> Vec<Result<Bytes, String>> {
        locations.iter().map(|&at| self.read(at)).collect()
    }
}

impl crate::broker::Broker {
    /// Attaches the store reader: from now on recovered and stored messages of durable queues
    /// may be kept as locations only (ADR 0007). Call before `restore`.
    pub fn set_message_source(&mut self, source: std::sync::Arc<dyn MessageSource>) {
        self.queues.pager.set_source(source.clone());
        for queue in self.queues.values_mut() {
            queue.pager.set_source(source.clone());
        }
    }

    /// Attaches the spill files where queues keep far-future delayed messages (ADR 0013). Call
    /// before `restore`: a queue that already holds delayed messages keeps them in memory.
    pub fn set_spill_files(&mut self, files: std::sync::Arc<dyn crate::queue::SpillFiles>) {
        self.queues.pager.set_spill_files(files.clone());
        for queue in self.queues.values_mut() {
            queue.attach_spill_files(files.clone());
        }
    }

    /// Spill runs of far-future delayed messages whose file did not read back (all queues):
    /// each was served from its roster in memory and written again, so no message was lost or
    /// delayed by it (issue 37). How many wait far is in each queue's stats
    /// (`messages_delayed_on_disk`).
    pub fn damaged_spill_runs(&self) -> u64 {
        self.queues.values().map(|q| q.delayed.damaged_spill_runs()).sum()
    }

    /// How much of each durable queue stays in memory (applies to every queue).
    pub fn set_paging_limits(&mut self, limits: crate::queue::PagingLimits) {
        self.queues.pager.limits = limits;
        for queue in self.queues.values_mut() {
            queue.pager.limits = limits;
        }
    }

    /// Messages dropped because their record could not be read back (all queues).
    pub fn unreadable_messages(&self) -> u64 {
        self.queues.values().map(|q| q.pager.unreadable).sum()
    }
}
