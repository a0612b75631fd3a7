//! The on-disk format: the segment header and the records. Pure functions, bytes in and out.
//!
//! ```text
//! segment header (32 bytes, little-endian)
//!   0..8   magic "HGLSSEG\0"
//!   8..12  format version (FORMAT_VERSION)
//!   12..16 records in the previous segment (sequence - 1) when this one was created
//!   16..24 segment sequence (equals the number in the file name)
//!   24..28 bytes of the previous segment then (0: unknown; no such segment, or an older writer)
//!   28..32 CRC32C of bytes 0..28
//!
//! record (28-byte header, then payload)
//!   0..4   CRC32C of bytes 4..end (the rest of the header and the payload)
//!   4..8   payload bytes (metadata + body)
//!   8      kind: 1 enqueue, 2 settle, 3 update, 4 purge
//!   9      reserved, zero
//!   10..12 metadata bytes (the payload's first part; enqueue and update only)
//!   12..20 queue id
//!   20..28 message id (zero for purge)
//!   28..   payload: metadata, then body (enqueue only)
//!
//! tail mark (32 bytes, the file `tail.mark` beside the segments; rewritten after each sync)
//!   0..8   magic "HGLSTAIL"
//!   8..16  segment sequence
//!   16..20 that segment's bytes, all synced
//!   20..24 its records in those bytes
//!   24..28 reserved, zero
//!   28..32 CRC32C of bytes 0..28
//! ```
//!
//! The previous segment's length and record count were reserved zeros before issue 37: a reader
//! that ignores them (any earlier build) reads these headers as before, and zero means unknown.

use crate::limits::{BODY_BYTES_MAX, METADATA_BYTES_MAX};

/// Version of the segment format; a segment with another version is refused, never guessed at.
pub const FORMAT_VERSION: u32 = 1;
pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"HGLSSEG\0";
pub(crate) const SEGMENT_HEADER_BYTES: usize = 32;
pub(crate) const RECORD_HEADER_BYTES: usize = 28;
/// Largest segment sequence: the live index packs a sequence and an offset in one `u64`, so a
/// sequence stays below 2^32. A file named past it is not one we wrote, and the store stops
/// appending before its log would need it (2^32 rotations: 256 PiB at 64 MiB segments).
pub(crate) const SEGMENT_SEQUENCE_MAX: u64 = u32::MAX as u64;
/// Suffix of segment file names: `{sequence:020}.seg`.
pub(crate) const SEGMENT_SUFFIX: &str = ".seg";

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordKind {
    /// A message entered a queue: metadata and body follow.
    Enqueue = 1,
    /// A message left its queue (acked, expired, dead-lettered elsewhere, ...).
    Settle = 2,
    /// A message's metadata was replaced.
    Update = 3,
    /// Every message of the queue enqueued before this record left it.
    Purge = 4,
}

/// A decoded record header whose lengths are consistent with its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    pub(crate) crc: u32,
    pub(crate) payload_bytes: u32,
    pub(crate) kind: RecordKind,
    pub(crate) metadata_bytes: u16,
    pub(crate) queue: u64,
    pub(crate) msg_id: u64,
}

/// Name of the tail mark file, beside the segments (not a `.seg`: earlier builds ignore it).
pub(crate) const TAIL_MARK_NAME: &str = "tail.mark";
pub(crate) const TAIL_MARK_BYTES: usize = 32;
const TAIL_MARK_MAGIC: [u8; 8] = *b"HGLSTAIL";

/// A segment's length and record count at a sync: recovery reads everything below `bytes` as
/// synced (docs/storage.md "Recovery rules").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SegmentEnd {
    pub(crate) bytes: u64,
    pub(crate) records: u64,
}

/// Why a record header cannot be a record we wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderDefect {
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    #[error("reserved byte is {0}, not zero")]
    Reserved(u8),
    #[error("lengths do not fit the record kind (payload {payload}, metadata {metadata})")]
    Lengths { payload: u32, metadata: u16 },
}

/// Why a segment header is not usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SegmentHeaderDefect {
    #[error("bad magic or checksum")]
    Damaged,
    #[error("format version {0} (this build reads {FORMAT_VERSION})")]
    UnsupportedVersion(u32),
    #[error("header names sequence {0}, not the file's")]
    WrongSequence(u64),
}

impl RecordKind {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Enqueue,
            2 => Self::Settle,
            3 => Self::Update,
            4 => Self::Purge,
            _ => return None,
        })
    }
}

impl RecordHeader {
    /// Decodes and checks a header (not its checksum, which covers the payload too).
    pub(crate) fn decode(bytes: &[u8; RECORD_HEADER_BYTES]) -> Result<Self, HeaderDefect> {
        let kind = RecordKind::from_byte(bytes[8]).ok_or(HeaderDefect::UnknownKind(bytes[8]))?;
        if bytes[9] != 0 {
            return Err(HeaderDefect::Reserved(bytes[9]));
        }
        let header = Self {
            crc: u32_at(bytes, 0),
            payload_bytes: u32_at(bytes, 4),
            kind,
            metadata_bytes: u16::from_le_bytes([bytes[10], bytes[11]]),
            queue: u64_at(bytes, 12),
            msg_id: u64_at(bytes, 20),
        };
        if !header.lengths_fit_kind() {
            return Err(HeaderDefect::Lengths {
                payload: header.payload_bytes,
                metadata: header.metadata_bytes,
            });
        }
        Ok(header)
    }

    /// Header plus payload.
    pub(crate) fn record_bytes(&self) -> u64 {
        RECORD_HEADER_BYTES as u64 + u64::from(self.payload_bytes)
    }

    /// Body bytes: the payload after the metadata.
    pub(crate) fn body_bytes(&self) -> u32 {
        self.payload_bytes - u32::from(self.metadata_bytes)
    }

    fn lengths_fit_kind(&self) -> bool {
        let metadata = usize::from(self.metadata_bytes);
        let payload = self.payload_bytes as usize;
        match self.kind {
            RecordKind::Enqueue => {
                metadata <= METADATA_BYTES_MAX && metadata <= payload && payload - metadata <= BODY_BYTES_MAX
            }
            RecordKind::Update => metadata <= METADATA_BYTES_MAX && payload == metadata,
            RecordKind::Settle | RecordKind::Purge => payload == 0 && metadata == 0,
        }
    }
}

/// Appends one record to `buf`; returns its length in bytes. The caller has checked the limits.
pub(crate) fn encode_record(
    buf: &mut Vec<u8>,
    kind: RecordKind,
    queue: u64,
    msg_id: u64,
    metadata: &[u8],
    body: &[u8],
) -> usize {
    debug_assert!(metadata.len() <= METADATA_BYTES_MAX && body.len() <= BODY_BYTES_MAX);
    let payload_bytes = (metadata.len() + body.len()) as u32;
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&payload_bytes.to_le_bytes());
    buf.push(kind as u8);
    buf.push(0);
    buf.extend_from_slice(&(metadata.len() as u16).to_le_bytes());
    buf.extend_from_slice(&queue.to_le_bytes());
    buf.extend_from_slice(&msg_id.to_le_bytes());
    let crc = crc32c::crc32c(&buf[start + 4..]);
    let crc = crc32c::crc32c_append(crc, metadata);
    let crc = crc32c::crc32c_append(crc, body);
    buf.extend_from_slice(metadata);
    buf.extend_from_slice(body);
    buf[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    buf.len() - start
}

/// The header of segment `sequence`; `previous`: where segment `sequence - 1` ended, synced whole
/// before this one is created (unknown, or too large for the field: recorded as unknown).
pub(crate) fn encode_segment_header(
    sequence: u64,
    previous: Option<SegmentEnd>,
) -> [u8; SEGMENT_HEADER_BYTES] {
    let (records, bytes) = previous
        .and_then(|end| Some((u32::try_from(end.records).ok()?, u32::try_from(end.bytes).ok()?)))
        .unwrap_or((0, 0));
    let mut out = [0; SEGMENT_HEADER_BYTES];
    out[0..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&records.to_le_bytes());
    out[16..24].copy_from_slice(&sequence.to_le_bytes());
    out[24..28].copy_from_slice(&bytes.to_le_bytes());
    let crc = crc32c::crc32c(&out[..28]);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Checks the header of the segment named with `sequence`; returns where the previous segment
/// ended when this one was created, if the header says.
pub(crate) fn check_segment_header(
    bytes: &[u8; SEGMENT_HEADER_BYTES],
    sequence: u64,
) -> Result<Option<SegmentEnd>, SegmentHeaderDefect> {
    if bytes[0..8] != SEGMENT_MAGIC || crc32c::crc32c(&bytes[..28]) != u32_at(bytes, 28) {
        return Err(SegmentHeaderDefect::Damaged);
    }
    let version = u32_at(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(SegmentHeaderDefect::UnsupportedVersion(version));
    }
    let found = u64_at(bytes, 16);
    if found != sequence {
        return Err(SegmentHeaderDefect::WrongSequence(found));
    }
    let previous_bytes = u64::from(u32_at(bytes, 24));
    let previous = SegmentEnd { bytes: previous_bytes, records: u64::from(u32_at(bytes, 12)) };
    Ok((previous_bytes > 0).then_some(previous))
}

/// The tail mark: segment `segment` held `end` (synced).
pub(crate) fn encode_tail_mark(segment: u64, end: SegmentEnd) -> [u8; TAIL_MARK_BYTES] {
    let mut out = [0; TAIL_MARK_BYTES];
    out[0..8].copy_from_slice(&TAIL_MARK_MAGIC);
    out[8..16].copy_from_slice(&segment.to_le_bytes());
    // A segment's bytes and records fit `u32` (offsets are `u32`); past that, claim nothing.
    let (bytes, records) = match (u32::try_from(end.bytes), u32::try_from(end.records)) {
        (Ok(bytes), Ok(records)) => (bytes, records),
        _ => (0, 0),
    };
    out[16..20].copy_from_slice(&bytes.to_le_bytes());
    out[20..24].copy_from_slice(&records.to_le_bytes());
    let crc = crc32c::crc32c(&out[..28]);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Reads a tail mark; `None` unless it is whole and names a length (a mark torn or garbled by a
/// crash proves nothing, and is ignored).
pub(crate) fn decode_tail_mark(bytes: &[u8]) -> Option<(u64, SegmentEnd)> {
    let bytes = bytes.get(..TAIL_MARK_BYTES)?;
    if bytes[0..8] != TAIL_MARK_MAGIC || crc32c::crc32c(&bytes[..28]) != u32_at(bytes, 28) {
        return None;
    }
    let end = SegmentEnd { bytes: u64::from(u32_at(bytes, 16)), records: u64::from(u32_at(bytes, 20)) };
    (end.bytes > 0).then_some((u64_at(bytes, 8), end))
}

/// The file name of segment `sequence`; zero-padded so names sort like numbers.
pub(crate) fn segment_name(sequence: u64) -> String {
    format!("{sequence:020}{SEGMENT_SUFFIX}")
}

/// The sequence of a segment file name; `None` for names that are not segments.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|seq| *seq <= SEGMENT_SEQUENCE_MAX)
}

pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header_of(buf: &[u8]) -> RecordHeader {
        RecordHeader::decode(buf[..RECORD_HEADER_BYTES].try_into().unwrap()).unwrap()
    }

    /// An encoded enqueue decodes to its fields, and its checksum covers header and payload.
    #[test]
    fn enqueue_roundtrips_with_checksum_over_header_and_payload() {
        let mut buf = Vec::new();
        let n = encode_record(&mut buf, RecordKind::Enqueue, 7, 42, b"meta", b"body!");
        assert_eq!(n, RECORD_HEADER_BYTES + 9);
        let header = header_of(&buf);
        assert_eq!(header.kind, RecordKind::Enqueue);
        assert_eq!((header.queue, header.msg_id), (7, 42));
        assert_eq!((header.metadata_bytes, header.body_bytes()), (4, 5));
        assert_eq!(header.record_bytes(), n as u64);
        assert_eq!(header.crc, crc32c::crc32c(&buf[4..]));
    }

    /// A settle with a payload, or an unknown kind, is refused before any checksum is computed.
    #[test]
    fn inconsistent_headers_are_refused() {
        let mut buf = Vec::new();
        encode_record(&mut buf, RecordKind::Settle, 1, 2, &[], &[]);
        let mut bytes: [u8; RECORD_HEADER_BYTES] = buf[..RECORD_HEADER_BYTES].try_into().unwrap();
        bytes[4] = 1;
        assert!(matches!(RecordHeader::decode(&bytes), Err(HeaderDefect::Lengths { .. })));
        bytes[4] = 0;
        bytes[8] = 9;
        assert_eq!(RecordHeader::decode(&bytes), Err(HeaderDefect::UnknownKind(9)));
        assert_eq!(RecordHeader::decode(&[0; RECORD_HEADER_BYTES]), Err(HeaderDefect::UnknownKind(0)));
    }

    /// A segment header checks magic, checksum, version and sequence, and carries where the
    /// previous segment ended (zero: unknown, as every earlier build wrote it).
    #[test]
    fn segment_header_checks_version_and_sequence() {
        let end = SegmentEnd { bytes: 4000, records: 30 };
        let header = encode_segment_header(5, Some(end));
        assert_eq!(check_segment_header(&header, 5), Ok(Some(end)));
        assert_eq!(check_segment_header(&encode_segment_header(5, None), 5), Ok(None));
        let too_long = SegmentEnd { bytes: 1 << 32, records: 1 };
        assert_eq!(check_segment_header(&encode_segment_header(5, Some(too_long)), 5), Ok(None));
        assert_eq!(check_segment_header(&header, 6), Err(SegmentHeaderDefect::WrongSequence(5)));
        let mut newer = header;
        newer[8] = 2;
        let crc = crc32c::crc32c(&newer[..28]);
        newer[28..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(check_segment_header(&newer, 5), Err(SegmentHeaderDefect::UnsupportedVersion(2)));
        let mut torn = header;
        torn[20] ^= 1;
        assert_eq!(check_segment_header(&torn, 5), Err(SegmentHeaderDefect::Damaged));
    }

    /// A tail mark reads back only whole: any flipped byte makes it claim nothing.
    #[test]
    fn tail_mark_roundtrips_and_a_damaged_one_claims_nothing() {
        let end = SegmentEnd { bytes: 1234, records: 9 };
        let mark = encode_tail_mark(7, end);
        assert_eq!(decode_tail_mark(&mark), Some((7, end)));
        assert_eq!(decode_tail_mark(&mark[..31]), None);
        for at in 0..TAIL_MARK_BYTES {
            let mut damaged = mark;
            damaged[at] ^= 0x20;
            assert_eq!(decode_tail_mark(&damaged), None, "byte {at}");
        }
        assert_eq!(decode_tail_mark(&encode_tail_mark(7, SegmentEnd::default())), None);
    }

    /// Segment names sort like their sequence numbers and parse back; other names are not segments.
    #[test]
    fn segment_names_roundtrip() {
        assert_eq!(segment_name(12), "00000000000000000012.seg");
        let max = SEGMENT_SEQUENCE_MAX;
        assert_eq!(parse_segment_name(&segment_name(max)), Some(max));
        assert_eq!(parse_segment_name(&segment_name(max + 1)), None);
        assert_eq!(parse_segment_name("12.seg"), None);
        assert_eq!(parse_segment_name("definitions.snap"), None);
        assert_eq!(parse_segment_name("0000000000000000001x.seg"), None);
    }

    proptest! {
        /// Any record roundtrips, and flipping any byte of it is caught by header checks or the CRC.
        #[test]
        fn any_record_roundtrips_and_any_flip_is_detected(
            kind in 1u8..=4, queue: u64, msg_id: u64,
            metadata in proptest::collection::vec(any::<u8>(), 0..16),
            body in proptest::collection::vec(any::<u8>(), 0..64),
            flip_at: usize,
        ) {
            let kind = RecordKind::from_byte(kind).unwrap();
            let (metadata, body) = match kind {
                RecordKind::Enqueue => (metadata, body),
                RecordKind::Update => (metadata, Vec::new()),
                RecordKind::Settle | RecordKind::Purge => (Vec::new(), Vec::new()),
            };
            let mut buf = Vec::new();
            encode_record(&mut buf, kind, queue, msg_id, &metadata, &body);
            let header = header_of(&buf);
            prop_assert_eq!((header.kind, header.queue, header.msg_id), (kind, queue, msg_id));
            prop_assert_eq!(header.crc, crc32c::crc32c(&buf[4..]));
            let at = flip_at % buf.len();
            buf[at] ^= 0x10;
            let bytes: [u8; RECORD_HEADER_BYTES] = buf[..RECORD_HEADER_BYTES].try_into().unwrap();
            let detected = match RecordHeader::decode(&bytes) {
                Err(_) => true,
                Ok(h) => h.crc != crc32c::crc32c(&buf[4..]) || h.record_bytes() != buf.len() as u64,
            };
            prop_assert!(detected);
        }
    }
}
