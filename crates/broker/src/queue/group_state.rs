//! The message groups in a queue's state (state version 4, `checkpoint.rs`): for each group, the
//! seqs of its messages that the state holds, the ready ones (`message_groups.rs`) apart from
//! the waiting ones (`Queue::waiting_groups`), so that a restart rebuilds an SQS FIFO or fair
//! queue's groups from the checkpoint instead of reading every message's metadata back from the
//! log.
//!
//! Layout (fixed-width little-endian words, as the rest of a state): a count of groups, then per
//! group its key, its seq count, and its seqs as a length and that many bytes: rising seqs, the
//! first as it is and each later one as its step from the one before, in LEB128. A group's
//! messages sent one after another cost about a byte each.

use super::entry::Seq;
use super::message_groups::GroupKey;
use super::state_bytes::{StateReader, StateWriter};

/// Each group's seqs, rising.
pub(crate) type GroupSeqs = Vec<(GroupKey, Vec<Seq>)>;

/// Key, seq count and byte length: the words each group takes at least.
const GROUP_WORDS: usize = 3;

/// Appends `groups` (each group's seqs rising; a group without any is left out).
pub(crate) fn write_groups<S: IntoIterator<Item = Seq>>(
    out: &mut StateWriter,
    groups: impl IntoIterator<Item = (GroupKey, S)>,
) {
    let mut encoded = Vec::new();
    for (group, seqs) in groups {
        let mut bytes = Vec::new();
        let mut count = 0u64;
        let mut last = 0;
        for seq in seqs {
            let step = if count == 0 { seq } else { seq - last };
            write_leb128(&mut bytes, step);
            (last, count) = (seq, count + 1);
        }
        if count > 0 {
            encoded.push((group, count, bytes));
        }
    }
    out.u64(encoded.len() as u64);
    for (group, count, bytes) in encoded {
        out.u64(group);
        out.u64(count);
        out.u64(bytes.len() as u64);
        out.raw(&bytes);
    }
}

/// What [`write_groups`] wrote; `None` unless every group's seqs decode whole, rise, and take
/// exactly their bytes, and no group comes twice.
pub(crate) fn read_groups(state: &mut StateReader) -> Option<GroupSeqs> {
    let count = state.count(GROUP_WORDS * 8)?;
    let mut groups: GroupSeqs = Vec::with_capacity(count);
    let mut keys = std::collections::HashSet::with_capacity(count);
    for _ in 0..count {
        let group = state.u64()?;
        let seqs = usize::try_from(state.u64()?).ok()?;
        let length = state.count(1)?;
        // Each seq takes a byte at least.
        if seqs == 0 || seqs > length || !keys.insert(group) {
            return None;
        }
        groups.push((group, read_seqs(state.raw(length)?, seqs)?));
    }
    Some(groups)
}

/// `count` rising seqs from `bytes`, which they fill exactly.
fn read_seqs(mut bytes: &[u8], count: usize) -> Option<Vec<Seq>> {
    let mut seqs = Vec::with_capacity(count);
    for _ in 0..count {
        let step = read_leb128(&mut bytes)?;
        let seq = match seqs.last() {
            None => step,
            Some(_) if step == 0 => return None,
            Some(last) => Seq::checked_add(*last, step)?,
        };
        seqs.push(seq);
    }
    bytes.is_empty().then_some(seqs)
}

fn write_leb128(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// One LEB128 number from the front of `bytes` (at most 10 bytes, no bits past 64).
fn read_leb128(bytes: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for (at, &byte) in bytes.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        if at == 9 && bits > 1 {
            return None;
        }
        n |= bits << (7 * at);
        if byte & 0x80 == 0 {
            *bytes = &bytes[at + 1..];
            return Some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parts(out: StateWriter) -> Vec<Bytes> {
        out.finish().iter().map(|part| part.bytes().clone()).collect()
    }

    #[test]
    fn groups_read_back_as_written_and_a_steady_group_costs_a_byte_a_message() {
        let written: GroupSeqs =
            vec![(7, (1000..2000).collect()), (u64::MAX, vec![0, 5, u64::MAX]), (9, vec![3])];
        let mut out = StateWriter::default();
        write_groups(&mut out, written.iter().cloned().chain([(4, Vec::new())]));
        let parts = parts(out);
        let bytes: usize = parts.iter().map(Bytes::len).sum();
        assert!(bytes < 1000 + 20 + 2 + 10 + 1 + 4 * 8 * 4, "{bytes} bytes");
        let mut reader = StateReader::new(parts);
        assert_eq!(read_groups(&mut reader), Some(written), "the empty group left out");
        assert!(reader.is_empty());
    }

    /// A state whose groups do not decode whole is refused: cut anywhere, a seq out of order,
    /// a group twice, bytes left over.
    #[test]
    fn groups_that_do_not_read_back_whole_are_refused() {
        let encode = |groups: &[(GroupKey, Vec<u64>)], extra: &[u8]| {
            let mut out = StateWriter::default();
            out.u64(groups.len() as u64);
            for (group, steps) in groups {
                let mut bytes = Vec::new();
                steps.iter().for_each(|step| write_leb128(&mut bytes, *step));
                bytes.extend_from_slice(extra);
                out.u64(*group);
                out.u64(steps.len() as u64);
                out.u64(bytes.len() as u64);
                out.raw(&bytes);
            }
            parts(out).concat()
        };
        let read = |bytes: Vec<u8>| read_groups(&mut StateReader::new(vec![Bytes::from(bytes)]));
        let good = encode(&[(1, vec![5, 1, 1]), (2, vec![4])], &[]);
        assert_eq!(read(good.clone()), Some(vec![(1, vec![5, 6, 7]), (2, vec![4])]));
        for cut in 0..good.len() {
            assert_eq!(read(good[..cut].to_vec()), None, "cut at {cut}");
        }
        assert_eq!(read(encode(&[(1, vec![5, 0])], &[])), None, "a seq twice");
        assert_eq!(read(encode(&[(1, vec![u64::MAX, 1])], &[])), None, "past the last seq");
        assert_eq!(read(encode(&[(1, vec![5]), (1, vec![9])], &[])), None, "a group twice");
        assert_eq!(read(encode(&[(1, vec![5])], &[0])), None, "a byte left over");
        let mut too_long = Vec::new();
        write_leb128(&mut too_long, u64::MAX);
        too_long[9] |= 0x02;
        assert_eq!(read_leb128(&mut too_long.as_slice()), None, "bits past 64");
    }
}
