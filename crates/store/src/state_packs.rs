//! Kept parts of queue states, written once (ADR 0020): the parts of a state its owner keeps
//! unchanged for as long as it holds them (a far tier's spill-run rosters) go to *pack* files,
//! and a checkpoint names them there instead of writing them again. A checkpoint then costs what
//! changed since the last one, at any backlog; before, every checkpoint wrote every roster
//! (534 MB at 100M delayed messages).
//!
//! - A pack is written once, when the checkpoint taken at segment `S` is written: every kept part
//!   not written yet, one after another, in `<S>.states`, synced before the checkpoint that
//!   names them is renamed into place. It is never changed after.
//! - A part is known by its bytes' address and length: the registry holds a clone of every part
//!   it has written, so no other bytes can take that address while it is known, and bytes that
//!   are shared are never changed. The registry forgets a part once its owner no longer offers
//!   it, and a pack none of whose parts it knows is deleted after the next checkpoint is written.
//! - A restart reads each part the checkpoint names from its pack, each into bytes of its own
//!   (a part that died frees its memory), checks its length and CRC32C, and knows it again, so
//!   the next checkpoint names it without writing it.
//! - A checkpoint writes at most a budget of bytes (the cluster's limit): a state whose new
//!   parts do not fit is left out of this one, but as many of its parts as fit are written
//!   ahead, so a large state that never fits whole is written over several checkpoints.

use std::collections::{BTreeSet, HashMap};
use std::io;

use bytes::Bytes;

use crate::storage::{Storage, StorageFile};
use crate::varint::{self, Malformed, Reader};

/// Pack files' names end so.
pub(crate) const PACK_SUFFIX: &str = ".states";

/// Pack `seq`'s file name (the segment its first checkpoint was taken at).
pub(crate) fn pack_name(seq: u64) -> String {
    format!("{seq:020}{PACK_SUFFIX}")
}

fn parse_pack_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(PACK_SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// Whether a file of the message log's directory is only ever appended to or written once
/// (segments and packs), so that a copy of it may be sent by byte range.
pub fn is_write_once(name: &str) -> bool {
    name.ends_with(crate::record::SEGMENT_SUFFIX) || name.ends_with(PACK_SUFFIX)
}

/// Where a kept part lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PartRef {
    pub(crate) pack: u64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) crc: u32,
}

impl PartRef {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        for n in [self.pack, self.offset, self.len, u64::from(self.crc)] {
            varint::put(out, n);
        }
    }

    pub(crate) fn decode(input: &mut Reader<'_>) -> Result<PartRef, Malformed> {
        let (pack, offset, len) = (input.u64()?, input.u64()?, input.u64()?);
        let crc = u32::try_from(input.u64()?).map_err(|_| Malformed)?;
        offset.checked_add(len).ok_or(Malformed)?;
        Ok(PartRef { pack, offset, len, crc })
    }
}

/// A part's identity while it is known: its bytes' address and length.
type Identity = (usize, usize);

fn identity(bytes: &Bytes) -> Identity {
    (bytes.as_ptr() as usize, bytes.len())
}

/// The kept parts written to packs and still offered (module doc).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    known: HashMap<Identity, (Bytes, PartRef)>,
}

impl Registry {
    /// Where `part` was written, if it was.
    pub(crate) fn find(&self, part: &Bytes) -> Option<PartRef> {
        self.known.get(&identity(part)).map(|(_, at)| *at)
    }

    /// `part` lies at `at`.
    pub(crate) fn know(&mut self, part: Bytes, at: PartRef) {
        self.known.insert(identity(&part), (part, at));
    }

    /// Forgets every part not in `offered`.
    pub(crate) fn keep_only(&mut self, offered: &[Bytes]) {
        let offered: std::collections::HashSet<Identity> = offered.iter().map(identity).collect();
        self.known.retain(|id, _| offered.contains(id));
    }

    /// The known parts' bytes.
    #[cfg(test)]
    pub(crate) fn known_bytes(&self) -> impl Iterator<Item = &Bytes> {
        self.known.values().map(|(bytes, _)| bytes)
    }

    /// Whether pack `seq` holds a known part.
    pub(crate) fn holds_pack(&self, seq: u64) -> bool {
        self.known.values().any(|(_, at)| at.pack == seq)
    }

    /// The packs that hold a known part.
    fn packs(&self) -> BTreeSet<u64> {
        self.known.values().map(|(_, at)| at.pack).collect()
    }

    /// Deletes every pack in `storage` that holds no known part (a failure is left for the next
    /// time). Returns how many were deleted.
    pub(crate) fn delete_unknown_packs(&self, storage: &dyn Storage) -> usize {
        let live = self.packs();
        let Ok(names) = storage.list() else { return 0 };
        names
            .iter()
            .filter(|name| parse_pack_name(name).is_some_and(|seq| !live.contains(&seq)))
            .filter(|name| storage.remove(name).is_ok())
            .count()
    }
}

/// A pack being planned: the parts it will hold, at their offsets.
#[derive(Debug, Default)]
pub(crate) struct NewPack {
    pub(crate) parts: Vec<Bytes>,
    placed: HashMap<Identity, u64>,
    pub(crate) bytes: u64,
}

impl NewPack {
    /// Adds `part` unless it is added already; returns the bytes this added.
    pub(crate) fn add(&mut self, part: &Bytes) -> u64 {
        if self.placed.contains_key(&identity(part)) {
            return 0;
        }
        self.placed.insert(identity(part), self.bytes);
        self.bytes += part.len() as u64;
        self.parts.push(part.clone());
        part.len() as u64
    }

    /// Whether `part` is in it.
    pub(crate) fn holds(&self, part: &Bytes) -> bool {
        self.placed.contains_key(&identity(part))
    }

    /// Writes the pack as file `seq` and syncs it; returns where each part lies. An empty pack
    /// writes nothing.
    pub(crate) fn write(self, storage: &dyn Storage, seq: u64) -> io::Result<Vec<(Bytes, PartRef)>> {
        if self.parts.is_empty() {
            return Ok(Vec::new());
        }
        let name = pack_name(seq);
        // One left by a write that failed before its checkpoint was written names nothing.
        match storage.remove(&name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let file = storage.create(&name)?;
        let mut placed = Vec::with_capacity(self.parts.len());
        let mut offset = 0;
        for part in self.parts {
            file.write_all_at(offset, &part)?;
            let at = PartRef { pack: seq, offset, len: part.len() as u64, crc: crc32c::crc32c(&part) };
            offset += at.len;
            placed.push((part, at));
        }
        file.sync()?;
        Ok(placed)
    }
}

/// Parts of at least this many bytes in all are read on two threads (a restart at 100M delayed
/// messages reads 534 MB of rosters, while the first pass's other thread has only the log's tail
/// to index).
const TWO_THREADS_FROM_BYTES: u64 = 64 << 20;

/// Reads the parts at `refs` from their packs, in order, each checked as [`PackReader::read`]
/// checks it: on this thread and one more when they are many bytes.
pub(crate) fn read_parts(storage: &dyn Storage, refs: &[PartRef]) -> Vec<Option<Bytes>> {
    read_parts_split(storage, refs, TWO_THREADS_FROM_BYTES)
}

/// [`read_parts`], on two threads from `two_threads_from` bytes.
fn read_parts_split(storage: &dyn Storage, refs: &[PartRef], two_threads_from: u64) -> Vec<Option<Bytes>> {
    let read_all = |refs: &[PartRef]| {
        let mut reader = PackReader::new(storage);
        refs.iter().map(|at| reader.read(*at)).collect::<Vec<_>>()
    };
    let total: u64 = refs.iter().map(|at| at.len).sum();
    if total < two_threads_from {
        return read_all(refs);
    }
    // Split where half of the bytes lie before.
    let mut before = 0;
    let half = refs
        .iter()
        .take_while(|at| {
            before += at.len;
            before <= total / 2
        })
        .count();
    let (first, second) = refs.split_at(half);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| read_all(first));
        let second = read_all(second);
        let mut first = first.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        first.extend(second);
        first
    })
}

/// Reads the parts a checkpoint names from their packs, each checked against its length and
/// CRC32C; `None` for a part that does not read back. Packs are opened once each.
#[derive(Debug)]
pub(crate) struct PackReader<'a> {
    storage: &'a dyn Storage,
    /// Each pack opened, with its length; `None` if it could not be.
    open: HashMap<u64, Option<OpenPack>>,
}

type OpenPack = (Box<dyn StorageFile>, u64);

impl<'a> PackReader<'a> {
    pub(crate) fn new(storage: &'a dyn Storage) -> Self {
        PackReader { storage, open: HashMap::new() }
    }

    pub(crate) fn read(&mut self, at: PartRef) -> Option<Bytes> {
        let storage = self.storage;
        let (file, file_len) = self
            .open
            .entry(at.pack)
            .or_insert_with(|| {
                let file = storage.open(&pack_name(at.pack)).ok()?;
                let len = file.len_bytes().ok()?;
                Some((file, len))
            })
            .as_ref()?;
        if at.offset.checked_add(at.len)? > *file_len {
            return None;
        }
        let mut bytes = vec![0; usize::try_from(at.len).ok()?];
        file.read_exact_at(at.offset, &mut bytes).ok()?;
        (crc32c::crc32c(&bytes) == at.crc).then(|| Bytes::from(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    #[test]
    fn pack_names_round_trip_and_only_packs_parse() {
        assert_eq!(pack_name(12), "00000000000000000012.states");
        assert_eq!(parse_pack_name(&pack_name(12)), Some(12));
        assert_eq!(parse_pack_name("00000000000000000012.seg"), None);
        assert_eq!(parse_pack_name("12.states"), None);
        assert!(is_write_once("00000000000000000012.states") && is_write_once("00000000000000000001.seg"));
        assert!(!is_write_once("index.ckpt"));
    }

    /// Parts written to a pack read back whole; a part whose bytes changed on disk, or that lies
    /// past its pack's end, or in a pack that is gone, does not.
    #[test]
    fn a_part_reads_back_only_as_written() {
        let storage = MemStorage::new();
        let (a, b) = (Bytes::from(vec![1u8; 100]), Bytes::from(vec![2u8; 50]));
        let mut pack = NewPack::default();
        assert_eq!(pack.add(&a) + pack.add(&b) + pack.add(&a), 150, "a part is added once");
        let placed = pack.write(&storage, 7).unwrap();
        assert_eq!(placed[1].1, PartRef { pack: 7, offset: 100, len: 50, crc: crc32c::crc32c(&b) });
        let mut reader = PackReader::new(&storage);
        assert_eq!(reader.read(placed[0].1).unwrap(), a);
        assert_eq!(reader.read(placed[1].1).unwrap(), b);
        assert!(reader.read(PartRef { offset: 120, ..placed[1].1 }).is_none(), "past the end");
        assert!(reader.read(PartRef { pack: 8, ..placed[1].1 }).is_none(), "no such pack");
        storage.open(&pack_name(7)).unwrap().write_all_at(120, &[9]).unwrap();
        assert!(PackReader::new(&storage).read(placed[1].1).is_none(), "a byte changed");
    }

    /// Parts read on two threads come back in order, each as one thread reads it: a damaged
    /// one as `None`, wherever the split falls.
    #[test]
    fn parts_read_on_two_threads_come_back_in_order() {
        let storage = MemStorage::new();
        let mut refs = Vec::new();
        for seq in 1..=3u64 {
            let mut pack = NewPack::default();
            for i in 0..5u8 {
                pack.add(&Bytes::from(vec![seq as u8 * 10 + i; 10 + usize::from(i) * 7]));
            }
            refs.extend(pack.write(&storage, seq).unwrap().into_iter().map(|(_, at)| at));
        }
        storage.open(&pack_name(2)).unwrap().write_all_at(3, &[0xff]).unwrap();
        let one_thread = read_parts_split(&storage, &refs, u64::MAX);
        assert_eq!(one_thread.iter().filter(|part| part.is_none()).count(), 1);
        assert!(one_thread[5].is_none(), "pack 2's first part was changed");
        for from in 0..refs.len() {
            let two_threads = read_parts_split(&storage, &refs[from..], 0);
            assert_eq!(two_threads, one_thread[from..], "from part {from}");
        }
    }

    /// The registry knows a part by its bytes, not their value, forgets what is no longer
    /// offered, and packs with nothing known are deleted.
    #[test]
    fn packs_whose_parts_are_all_forgotten_are_deleted() {
        let storage = MemStorage::new();
        let (a, b) = (Bytes::from(vec![1u8; 10]), Bytes::from(vec![1u8; 10]));
        let mut registry = Registry::default();
        for (seq, part) in [(1, &a), (2, &b)] {
            let mut pack = NewPack::default();
            pack.add(part);
            for (part, at) in pack.write(&storage, seq).unwrap() {
                registry.know(part, at);
            }
        }
        assert_eq!(registry.find(&a).unwrap().pack, 1);
        assert_eq!(registry.find(&b).unwrap().pack, 2, "equal bytes elsewhere are another part");
        assert!(registry.find(&Bytes::from(vec![1u8; 10])).is_none());
        storage.create("00000000000000000001.seg").unwrap();
        registry.keep_only(std::slice::from_ref(&b));
        assert_eq!(registry.delete_unknown_packs(&storage), 1);
        let mut names = storage.list().unwrap();
        names.sort();
        assert_eq!(names, vec!["00000000000000000001.seg".to_owned(), pack_name(2)]);
    }
}
