//! One far-future delayed message as the far tier keeps it (ADR 0013): an 80-byte record with a
//! CRC-32C, sorted and written in spill runs (`far_delays.rs`), and rebuilt from a run's roster
//! (`far_roster.rs`) when its file does not read back. A record read from a file is trusted only
//! once its checksum checks out: its due time decides when messages load and what `next_due`
//! shows, so a damaged one must never name either.

use super::delay::Waiting;
use super::entry::{Entry, Paged, Payload, Seq};
use crate::message::Hot;
use crate::persist::RecordLocation;
use crate::time::Timestamp;

/// One far record: due, id, store id, TTL deadline, ready time, hot properties, location, body
/// size, delivery count, flags, then a CRC-32C of the rest.
pub(crate) const RECORD_BYTES: usize = 80;
/// A TTL deadline or ready time that is not set.
pub(super) const NO_TIME: u64 = u64::MAX;
const REDELIVERED: u8 = 1;
const RETURNING: u8 = 2;
const CHECKED_BYTES: usize = 72;

pub(super) type Record = [u8; RECORD_BYTES];

/// What records are sorted by: (due ms, id).
pub(super) type Key = (u64, Seq);

/// A record that did not read back as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Damaged;

/// The key of a record held in memory (the write buffer, a roster): not checked, as nothing
/// could have changed it.
pub(super) fn key_of(record: &[u8]) -> Key {
    (u64_at(record, 0), u64_at(record, 8))
}

/// The smallest key after `key`: a bound below every record after it.
pub(super) fn key_after((due, id): Key) -> Key {
    match id.checked_add(1) {
        Some(next) => (due, next),
        None => (due.saturating_add(1), 0),
    }
}

/// The fields of a record, as the roster stores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fields {
    pub due: u64,
    pub seq: Seq,
    pub persist_id: u64,
    pub expires: u64,
    pub ready: u64,
    pub hot: u64,
    pub segment: u32,
    pub offset: u32,
    pub body_size: u32,
    pub record_bytes: u32,
    pub delivery_count: u32,
    pub flags: u8,
}

impl Fields {
    /// The fields of a record (its checksum not checked: records held in memory).
    pub fn of(record: &[u8]) -> Fields {
        Fields {
            due: u64_at(record, 0),
            seq: u64_at(record, 8),
            persist_id: u64_at(record, 16),
            expires: u64_at(record, 24),
            ready: u64_at(record, 32),
            hot: u64_at(record, 40),
            segment: u32_at(record, 48),
            offset: u32_at(record, 52),
            body_size: u32_at(record, 56),
            record_bytes: u32_at(record, 60),
            delivery_count: u32_at(record, 64),
            flags: record[68],
        }
    }

    /// The record holding these fields, with its checksum.
    pub fn record(&self) -> Record {
        let mut record = [0u8; RECORD_BYTES];
        let mut put = |at: usize, bytes: &[u8]| record[at..at + bytes.len()].copy_from_slice(bytes);
        put(0, &self.due.to_le_bytes());
        put(8, &self.seq.to_le_bytes());
        put(16, &self.persist_id.to_le_bytes());
        put(24, &self.expires.to_le_bytes());
        put(32, &self.ready.to_le_bytes());
        put(40, &self.hot.to_le_bytes());
        put(48, &self.segment.to_le_bytes());
        put(52, &self.offset.to_le_bytes());
        put(56, &self.body_size.to_le_bytes());
        put(60, &self.record_bytes.to_le_bytes());
        put(64, &self.delivery_count.to_le_bytes());
        put(68, &[self.flags]);
        let crc = crc32c::crc32c(&record[..CHECKED_BYTES]);
        record[CHECKED_BYTES..CHECKED_BYTES + 4].copy_from_slice(&crc.to_le_bytes());
        record
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// The record of a waiting message, if it can go far: paged out and stored. Nothing else can
/// (a transient message, or one not yet stored, is never paged): the store's log must be able to
/// bring every far message back at a restart.
pub(super) fn encode(due: Timestamp, waiting: &Waiting) -> Option<Record> {
    let returning = if waiting.returning { RETURNING } else { 0 };
    Some(fields_of(&waiting.entry, due.as_millis(), returning)?.record())
}

/// The record of a paged-out ready message (a queue state's, `ready/checkpoint.rs`): its due
/// time is not set.
pub(super) fn encode_ready(entry: &Entry) -> Option<Record> {
    Some(fields_of(entry, NO_TIME, 0)?.record())
}

fn fields_of(entry: &Entry, due: u64, flags: u8) -> Option<Fields> {
    let Payload::Paged(paged) = &entry.payload else { return None };
    let location = paged.location();
    Some(Fields {
        due,
        seq: entry.seq,
        persist_id: entry.persist_id()?,
        expires: entry.expires_at().map_or(NO_TIME, Timestamp::as_millis),
        ready: entry.ready_at().map_or(NO_TIME, Timestamp::as_millis),
        hot: entry.payload.hot().to_bits(),
        segment: u32::try_from(location.segment).ok()?,
        offset: location.offset,
        body_size: u32::try_from(entry.body_size()).ok()?,
        record_bytes: location.record_bytes,
        delivery_count: entry.delivery_count,
        flags: if entry.redelivered { REDELIVERED } else { 0 } | flags,
    })
}

/// The fields of a record whose length and checksum check out.
pub(super) fn fields_checked(record: &[u8]) -> Option<Fields> {
    let intact = record.len() == RECORD_BYTES
        && crc32c::crc32c(&record[..CHECKED_BYTES]) == u32_at(record, CHECKED_BYTES);
    intact.then(|| Fields::of(record))
}

/// The waiting message a record holds, checksum verified.
pub(super) fn decode(record: &[u8]) -> Result<(Timestamp, Waiting), Damaged> {
    let fields = fields_checked(record).ok_or(Damaged)?;
    let entry = entry_of(&fields)?;
    let returning = fields.flags & RETURNING != 0;
    Ok((Timestamp::from_millis(fields.due), Waiting { entry, returning }))
}

/// The paged-out ready message a record of [`encode_ready`] holds, checksum verified.
pub(super) fn decode_ready(record: &[u8]) -> Result<Entry, Damaged> {
    let fields = fields_checked(record).ok_or(Damaged)?;
    entry_of(&fields)
}

fn entry_of(fields: &Fields) -> Result<Entry, Damaged> {
    let time = |ms| Some(ms).filter(|ms| *ms != NO_TIME).map(Timestamp::from_millis);
    let location = RecordLocation {
        segment: u64::from(fields.segment),
        offset: fields.offset,
        record_bytes: fields.record_bytes,
    };
    let hot = Hot::from_bits(fields.hot);
    let paged = Paged::new(location, hot, fields.body_size as usize).ok_or(Damaged)?;
    let mut entry = Entry::with_payload(
        fields.seq,
        Payload::Paged(paged),
        time(fields.ready),
        time(fields.expires),
        Some(fields.persist_id),
    );
    entry.delivery_count = fields.delivery_count;
    entry.redelivered = fields.flags & REDELIVERED != 0;
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paged(seq: Seq) -> Waiting {
        let location = RecordLocation { segment: 3, offset: 64 * seq as u32, record_bytes: 100 };
        let paged = Paged::new(location, Hot::new(Some(5_000), 2, true), 16).unwrap();
        let mut entry = Entry::with_payload(seq, Payload::Paged(paged), None, None, Some(1000 + seq));
        entry.delivery_count = 3;
        Waiting { entry, returning: false }
    }

    /// A record reads back as the waiting message it was made of, also through its fields; a
    /// flipped bit is caught.
    #[test]
    fn records_round_trip_and_damage_is_caught() {
        let mut waiting = paged(7);
        waiting.entry.redelivered = true;
        waiting.returning = true;
        let mut record = encode(Timestamp::from_millis(123), &waiting).unwrap();
        assert_eq!(Fields::of(&record).record(), record);
        let (due, back) = decode(&record).unwrap();
        assert_eq!(due, Timestamp::from_millis(123));
        assert_eq!(back.entry.seq, 7);
        assert_eq!(back.entry.persist_id(), Some(1007));
        assert_eq!(back.entry.body_size(), 16);
        assert_eq!((back.entry.delivery_count, back.entry.redelivered, back.returning), (3, true, true));
        assert!(matches!(back.entry.payload, Payload::Paged(p) if p.location().offset == 64 * 7));
        assert_eq!(back.entry.payload.hot().expiration_ms(), Some(5_000));
        record[50] ^= 1;
        assert_eq!(decode(&record).err(), Some(Damaged));
    }

    /// The key after a key sorts right after it, also at the end of the id range.
    #[test]
    fn the_key_after_sorts_next() {
        assert_eq!(key_after((5, 9)), (5, 10));
        assert_eq!(key_after((5, u64::MAX)), (6, 0));
        assert!(key_after((5, 9)) > (5, 9));
    }
}
