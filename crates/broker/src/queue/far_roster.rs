//! A spill run's roster (issue 37): its records kept compact in memory, in id order, so that a
//! run whose file does not read back (bytes flipped, cut short, deleted, its directory gone) or
//! cannot be written is rebuilt at once instead of hiding its messages until a restart.
//!
//! Why memory and not the log: a far record is the message's store location plus its current
//! due time and counts. The log has the location in the store's live index, but the current due
//! time of a rescheduled or backed-off message is in whichever update record came last, which
//! the running store does not index. So the run keeps what it cannot get back elsewhere, and the
//! bodies stay where they are: in the log, read through the `MessageSource` when delivered.
//!
//! The cost is a few bytes per far message, against 80 on disk: records sorted by id differ from
//! the one before mostly in their id, their due time and their offset in the log, each written as
//! a varint of the step from the one before (an offset as the step from the previous record's
//! end); whatever else changes (segment, size, properties, counts) is written only when it does.
//! Measured in the tests: 3.0 B per message for a fixed delay, 5.5 B for due times spread at
//! random over an hour.

use bytes::Bytes;

use super::entry::Seq;
use super::far_record::{Fields, Record, NO_TIME};

const SEGMENT: u8 = 1;
const RECORD_BYTES: u8 = 2;
const HOT: u8 = 4;
const BODY_SIZE: u8 = 8;
/// A record that is not a plain first wait: another store id, a TTL deadline or ready time, a
/// delivery count or flags.
const EXTRAS: u8 = 16;

/// The records of one run, encoded in id order.
#[derive(Clone, Debug)]
pub(super) struct Roster {
    /// Shared, so a checkpoint takes it without a copy (`far_delays/checkpoint.rs`).
    bytes: Bytes,
    len: usize,
    /// What the first record is encoded against.
    first: Fields,
}

impl Roster {
    /// The roster of `records` (in any order).
    pub fn new(records: &[Record]) -> Roster {
        let mut fields: Vec<Fields> = records.iter().map(|record| Fields::of(record)).collect();
        fields.sort_unstable_by_key(|f| f.seq);
        let first = fields.first().map_or(NOTHING, |f| Fields { seq: f.seq, due: f.due, ..NOTHING });
        let mut bytes = Vec::with_capacity(fields.len() * 4);
        let mut previous = first;
        for field in &fields {
            encode(&mut bytes, field, &previous);
            previous = *field;
        }
        // Exactly as long as it is: a roster lives as long as its run.
        bytes.shrink_to_fit();
        Roster { bytes: Bytes::from(bytes), len: fields.len(), first }
    }

    /// A roster as [`Roster::parts`] gave it, if its bytes decode into `len` records in id
    /// order and nothing after (checked record by record: they come from a file); `visit` sees
    /// each record as it is checked (one pass over the bytes, not two).
    pub fn from_parts(
        bytes: Bytes,
        len: usize,
        first: Fields,
        mut visit: impl FnMut(&Fields),
    ) -> Option<Roster> {
        let mut at = 0;
        let mut previous = first;
        for n in 0..len {
            let fields = decode(&bytes, &mut at, &previous)?;
            // Ids are unique: each record's is above the one before (the first's may equal
            // `first`'s, which it was encoded against).
            if n > 0 && fields.seq == previous.seq {
                return None;
            }
            visit(&fields);
            previous = fields;
        }
        (at == bytes.len()).then_some(Roster { bytes, len, first })
    }

    /// A roster as [`Roster::parts`] gave it, taken back from a checkpoint without reading it:
    /// the checkpoint file is checksummed whole and was written by this layout, and a restart
    /// must not decode 100M messages' rosters to serve (ADR 0019). If its bytes should still
    /// not decode, [`Roster::records`] stops at the first bad one.
    pub fn from_checkpoint(bytes: Bytes, len: usize, first: Fields) -> Roster {
        Roster { bytes, len, first }
    }

    /// The roster's bytes, records and first record's base, for [`Roster::from_parts`].
    pub fn parts(&self) -> (Bytes, usize, Fields) {
        (self.bytes.clone(), self.len, self.first)
    }

    /// The records' fields, in id order.
    pub fn records(&self) -> impl Iterator<Item = Fields> + '_ {
        let mut at = 0;
        let mut previous = self.first;
        // A roster made in memory or checked by `from_parts` decodes whole.
        (0..self.len).map_while(move |_| {
            let fields = decode(&self.bytes, &mut at, &previous)?;
            previous = fields;
            Some(fields)
        })
    }

    /// The fields of record `seq`, if the run has it (a scan in memory, stopping past it).
    pub fn find(&self, seq: Seq) -> Option<Fields> {
        self.records().take_while(|f| f.seq <= seq).find(|f| f.seq == seq)
    }

    /// Bytes held for the records.
    #[cfg(test)]
    pub fn encoded_bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// What the first record is compared with: every field it has is written.
const NOTHING: Fields = Fields {
    due: 0,
    seq: 0,
    persist_id: 0,
    expires: NO_TIME,
    ready: NO_TIME,
    hot: 0,
    segment: 0,
    offset: 0,
    body_size: 0,
    record_bytes: 0,
    delivery_count: 0,
    flags: 0,
};

fn is_plain(f: &Fields) -> bool {
    f.persist_id == f.seq
        && f.expires == NO_TIME
        && f.ready == NO_TIME
        && f.delivery_count == 0
        && f.flags == 0
}

/// `(id step << 1 | changed)`, the due time's and the offset's steps, then a changes byte and the
/// fields it names when `changed`.
fn encode(out: &mut Vec<u8>, f: &Fields, previous: &Fields) {
    let mut changes = 0;
    for (differs, bit) in [
        (f.segment != previous.segment, SEGMENT),
        (f.record_bytes != previous.record_bytes, RECORD_BYTES),
        (f.hot != previous.hot, HOT),
        (f.body_size != previous.body_size, BODY_SIZE),
        (!is_plain(f), EXTRAS),
    ] {
        if differs {
            changes |= bit;
        }
    }
    let step = u128::from(f.seq - previous.seq);
    put(out, step << 1 | u128::from(changes != 0));
    put(out, zigzag(i128::from(f.due) - i128::from(previous.due)));
    put(out, zigzag(i128::from(f.offset) - next_offset(previous)));
    if changes == 0 {
        return;
    }
    out.push(changes);
    if changes & SEGMENT != 0 {
        put(out, u128::from(f.segment));
    }
    if changes & RECORD_BYTES != 0 {
        put(out, u128::from(f.record_bytes));
    }
    if changes & HOT != 0 {
        out.extend_from_slice(&f.hot.to_le_bytes());
    }
    if changes & BODY_SIZE != 0 {
        put(out, u128::from(f.body_size));
    }
    if changes & EXTRAS != 0 {
        put(out, zigzag(i128::from(f.persist_id) - i128::from(f.seq)));
        // NO_TIME (u64::MAX) wraps to 0: one byte for "not set".
        put(out, u128::from(f.expires.wrapping_add(1)));
        put(out, u128::from(f.ready.wrapping_add(1)));
        put(out, u128::from(f.delivery_count));
        out.push(f.flags);
    }
}

/// The record at `*at`, which [`encode`] wrote after `previous`; moves `*at` past it. `None`
/// where the bytes end early or a value does not fit (only bytes read back from a checkpoint
/// can; the `as` casts undo `encode`'s widenings).
fn decode(bytes: &[u8], at: &mut usize, previous: &Fields) -> Option<Fields> {
    let head = get(bytes, at)?;
    let mut f = *previous;
    f.seq = previous.seq.checked_add(u64::try_from(head >> 1).ok()?)?;
    f.due = u64::try_from(i128::from(previous.due) + unzigzag(get(bytes, at)?)).ok()?;
    f.offset = u32::try_from(next_offset(previous) + unzigzag(get(bytes, at)?)).ok()?;
    // A plain first wait unless the changes say otherwise (extras are not carried over).
    (f.persist_id, f.expires, f.ready, f.delivery_count, f.flags) = (f.seq, NO_TIME, NO_TIME, 0, 0);
    if head & 1 == 0 {
        return Some(f);
    }
    let changes = byte(bytes, at)?;
    if changes & SEGMENT != 0 {
        f.segment = get(bytes, at)? as u32;
    }
    if changes & RECORD_BYTES != 0 {
        f.record_bytes = get(bytes, at)? as u32;
    }
    if changes & HOT != 0 {
        let word = bytes.get(*at..*at + 8)?;
        *at += 8;
        f.hot = u64::from_le_bytes(word.try_into().ok()?);
    }
    if changes & BODY_SIZE != 0 {
        f.body_size = get(bytes, at)? as u32;
    }
    if changes & EXTRAS != 0 {
        f.persist_id = u64::try_from(i128::from(f.seq) + unzigzag(get(bytes, at)?)).ok()?;
        f.expires = (get(bytes, at)? as u64).wrapping_sub(1);
        f.ready = (get(bytes, at)? as u64).wrapping_sub(1);
        f.delivery_count = get(bytes, at)? as u32;
        f.flags = byte(bytes, at)?;
    }
    Some(f)
}

fn byte(bytes: &[u8], at: &mut usize) -> Option<u8> {
    let byte = *bytes.get(*at)?;
    *at += 1;
    Some(byte)
}

/// Where the record after `previous` would be if it followed it in the log (a queue's messages
/// published in a row mostly do): the offset is stored as the step from there.
fn next_offset(previous: &Fields) -> i128 {
    i128::from(previous.offset) + i128::from(previous.record_bytes)
}

fn zigzag(n: i128) -> u128 {
    ((n << 1) ^ (n >> 127)) as u128
}

fn unzigzag(n: u128) -> i128 {
    (n >> 1) as i128 ^ -((n & 1) as i128)
}

/// LEB128.
fn put(out: &mut Vec<u8>, mut n: u128) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn get(bytes: &[u8], at: &mut usize) -> Option<u128> {
    let mut n = 0u128;
    for shift in (0..128).step_by(7) {
        let byte = byte(bytes, at)?;
        n |= u128::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(seq: Seq, due: u64) -> Fields {
        Fields {
            due,
            seq,
            persist_id: seq,
            expires: NO_TIME,
            ready: NO_TIME,
            hot: 1 << 56,
            segment: 7,
            offset: 4096 + 90 * seq as u32,
            body_size: 16,
            record_bytes: 90,
            delivery_count: 0,
            flags: 0,
        }
    }

    /// A pseudo-random sequence (an LCG), so the tests need no dependency.
    fn lcg(state: &mut u64) -> u64 {
        *state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        *state >> 33
    }

    /// Whatever the records hold, the roster gives each back exactly, in id order, and finds
    /// each by id (and no other).
    #[test]
    fn records_come_back_exactly_in_id_order() {
        let mut state = 1;
        let mut fields: Vec<Fields> =
            (0..2_000).map(|i| plain(1_000 + 3 * i, 50_000 + lcg(&mut state) % 9_000)).collect();
        for (i, f) in fields.iter_mut().enumerate().filter(|(i, _)| i % 7 == 0) {
            f.segment += (i / 100) as u32;
            f.offset = lcg(&mut state) as u32;
            f.record_bytes = 90 + (i % 5) as u32;
            f.body_size = i as u32;
            f.hot = lcg(&mut state);
            if i % 3 == 0 {
                (f.expires, f.ready, f.delivery_count, f.flags) = (10 + i as u64, 5, 2, 3);
                f.persist_id = f.seq + 9;
            }
        }
        fields.last_mut().unwrap().seq = u64::MAX;
        let records: Vec<Record> = fields.iter().rev().map(Fields::record).collect();
        let roster = Roster::new(&records);
        let back: Vec<Fields> = roster.records().collect();
        assert_eq!(back, fields);
        assert_eq!(roster.find(fields[1234].seq), Some(fields[1234]));
        assert_eq!(roster.find(fields[1234].seq + 1), None);
        assert_eq!(roster.find(u64::MAX), fields.last().copied());
        assert!(Roster::new(&[]).records().next().is_none());
    }

    /// A roster taken apart comes back whole; bytes cut short, or another record count, do not.
    #[test]
    fn a_roster_comes_back_from_its_parts_only_whole() {
        let records: Vec<Record> = (0..500).map(|seq| plain(seq * 2, 9_000 + seq % 7).record()).collect();
        let roster = Roster::new(&records);
        let (bytes, len, first) = roster.parts();
        let mut visited = Vec::new();
        let back = Roster::from_parts(bytes.clone(), len, first, |f| visited.push(*f)).unwrap();
        assert!(back.records().eq(roster.records()));
        assert!(visited.into_iter().eq(roster.records()));
        assert!(Roster::from_parts(bytes.slice(..bytes.len() - 1), len, first, |_| {}).is_none());
        assert!(Roster::from_parts(bytes.clone(), len - 1, first, |_| {}).is_none());
        assert!(Roster::from_parts(bytes.clone(), len + 1, first, |_| {}).is_none());
        for cut in 0..bytes.len() {
            let _ = Roster::from_parts(bytes.slice(..cut), len, first, |_| {});
            let mut flipped = bytes.to_vec();
            flipped[cut] ^= 0xff;
            let _ = Roster::from_parts(Bytes::from(flipped), len, first, |_| {});
        }
    }

    /// The memory a roster costs per message: a few bytes, against 80 on disk.
    #[test]
    fn a_roster_costs_a_few_bytes_per_message() {
        let per_message = |dues: &dyn Fn(u64) -> u64| {
            let records: Vec<Record> = (0..16_384).map(|seq| plain(seq, dues(seq)).record()).collect();
            Roster::new(&records).encoded_bytes() as f64 / 16_384.0
        };
        let fixed_delay = per_message(&|seq| 3_600_000 + seq / 20);
        let mut state = 7;
        let random: Vec<u64> = (0..16_384).map(|_| lcg(&mut state) % 3_600_000).collect();
        let spread_over_an_hour = per_message(&|seq| 3_600_000 + random[seq as usize]);
        assert!(fixed_delay <= 3.5, "{fixed_delay} B per message");
        assert!(spread_over_an_hour <= 6.5, "{spread_over_an_hour} B per message");
    }
}
