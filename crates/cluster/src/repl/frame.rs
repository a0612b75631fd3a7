//! The replication protocol's frames and their encoding (docs/clustering.md "Replication").
//!
//! ```text
//! frame   = length:u32 (of kind + payload) kind:u8 payload
//! string  = length:u16 utf-8 bytes
//! leader → follower: Hello{term, leader} · Op{seq, op} (seq 0: catch-up) · CaughtUp{seq}
//! follower → leader: Manifest[{path, len, crc32c}] · Ack{seq}
//! ```
//!
//! The leader replicates *file operations* of its data directory (create, write at an offset,
//! set length, remove, rename), so a follower's directory is byte for byte the leader's and a
//! promoted follower recovers it exactly as a restarted broker recovers its own.

use std::io::{self, Read, Write};

use bytes::Bytes;

/// The largest frame accepted: one write op carries at most [`WRITE_CHUNK_MAX`] bytes, a manifest
/// a few thousand entries.
pub const FRAME_BYTES_MAX: usize = 32 << 20;
/// Larger writes are split into ops of this size, so frames stay bounded.
pub const WRITE_CHUNK_MAX: usize = 8 << 20;

/// A file operation, with the path relative to the data directory (`catalog.log`,
/// `messages/00000001.seg`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileOp {
    Create { path: String },
    Write { path: String, offset: u64, data: Bytes },
    SetLen { path: String, len: u64 },
    Remove { path: String },
    Rename { from: String, to: String },
}

impl FileOp {
    /// The bytes this op keeps in memory while queued (for the per-follower bound).
    pub fn weight(&self) -> usize {
        match self {
            FileOp::Write { data, .. } => data.len() + 64,
            _ => 64,
        }
    }
}

/// A follower's file as the leader compares it: length and CRC32C of the whole content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDigest {
    pub path: String,
    pub len: u64,
    pub crc: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Hello { term: u64, leader: String },
    Manifest(Vec<FileDigest>),
    Op { seq: u64, op: FileOp },
    CaughtUp { seq: u64 },
    Ack { seq: u64 },
}

const HELLO: u8 = 1;
const MANIFEST: u8 = 2;
const OP_CREATE: u8 = 3;
const OP_WRITE: u8 = 4;
const OP_SET_LEN: u8 = 5;
const OP_REMOVE: u8 = 6;
const OP_RENAME: u8 = 7;
const CAUGHT_UP: u8 = 8;
const ACK: u8 = 9;

/// Appends `frame`'s encoding to `out`.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    match frame {
        Frame::Hello { term, leader } => {
            out.push(HELLO);
            out.extend_from_slice(&term.to_be_bytes());
            put_str(out, leader);
        }
        Frame::Manifest(files) => {
            out.push(MANIFEST);
            out.extend_from_slice(&(files.len() as u32).to_be_bytes());
            for file in files {
                put_str(out, &file.path);
                out.extend_from_slice(&file.len.to_be_bytes());
                out.extend_from_slice(&file.crc.to_be_bytes());
            }
        }
        Frame::Op { seq, op } => encode_op(*seq, op, out),
        Frame::CaughtUp { seq } => {
            out.push(CAUGHT_UP);
            out.extend_from_slice(&seq.to_be_bytes());
        }
        Frame::Ack { seq } => {
            out.push(ACK);
            out.extend_from_slice(&seq.to_be_bytes());
        }
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

fn encode_op(seq: u64, op: &FileOp, out: &mut Vec<u8>) {
    let kind = match op {
        FileOp::Create { .. } => OP_CREATE,
        FileOp::Write { .. } => OP_WRITE,
        FileOp::SetLen { .. } => OP_SET_LEN,
        FileOp::Remove { .. } => OP_REMOVE,
        FileOp::Rename { .. } => OP_RENAME,
    };
    out.push(kind);
    out.extend_from_slice(&seq.to_be_bytes());
    match op {
        FileOp::Create { path } | FileOp::Remove { path } => put_str(out, path),
        FileOp::Write { path, offset, data } => {
            put_str(out, path);
            out.extend_from_slice(&offset.to_be_bytes());
            out.extend_from_slice(data);
        }
        FileOp::SetLen { path, len } => {
            put_str(out, path);
            out.extend_from_slice(&len.to_be_bytes());
        }
        FileOp::Rename { from, to } => {
            put_str(out, from);
            put_str(out, to);
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, frame: &Frame) -> io::Result<()> {
    let mut buf = Vec::new();
    encode(frame, &mut buf);
    w.write_all(&buf)
}

/// Reads one frame; `InvalidData` for anything malformed or over [`FRAME_BYTES_MAX`].
pub fn read_frame(r: &mut impl Read) -> io::Result<Frame> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > FRAME_BYTES_MAX {
        return Err(invalid("frame length out of bounds"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    decode(Bytes::from(body))
}

/// Reads frames from a stream with a read timeout without ever losing part of one: bytes are
/// kept until a whole frame is there.
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
}

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader { inner, buf: Vec::with_capacity(1 << 16), start: 0 }
    }

    /// The length of the whole frame at the front of the buffer, if it is all there.
    fn complete(&self) -> io::Result<Option<usize>> {
        let pending = &self.buf[self.start..];
        let Some(header) = pending.get(..4) else { return Ok(None) };
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if len == 0 || len > FRAME_BYTES_MAX {
            return Err(invalid("frame length out of bounds"));
        }
        Ok((pending.len() >= 4 + len).then_some(4 + len))
    }

    /// Whether another whole frame is already buffered (the sender has not paused).
    pub fn has_frame(&self) -> bool {
        matches!(self.complete(), Ok(Some(_)))
    }

    /// The next frame; `None` when the read timed out first. `UnexpectedEof` when the peer closed.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        loop {
            if let Some(total) = self.complete()? {
                let body = Bytes::copy_from_slice(&self.buf[self.start + 4..self.start + total]);
                self.start += total;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                return decode(body).map(Some);
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.inner.read(&mut chunk) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed")),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Decodes one frame's kind and payload.
pub fn decode(body: Bytes) -> io::Result<Frame> {
    let mut c = Cursor { bytes: body, at: 1 };
    let kind = *c.bytes.first().ok_or_else(|| invalid("empty frame"))?;
    let frame = match kind {
        HELLO => Frame::Hello { term: c.u64()?, leader: c.string()? },
        MANIFEST => {
            let count = c.u32()? as usize;
            let mut files = Vec::with_capacity(count.min(4096));
            for _ in 0..count {
                files.push(FileDigest { path: c.string()?, len: c.u64()?, crc: c.u32()? });
            }
            Frame::Manifest(files)
        }
        OP_CREATE => Frame::Op { seq: c.u64()?, op: FileOp::Create { path: c.string()? } },
        OP_WRITE => {
            let seq = c.u64()?;
            let (path, offset) = (c.string()?, c.u64()?);
            Frame::Op { seq, op: FileOp::Write { path, offset, data: c.rest() } }
        }
        OP_SET_LEN => Frame::Op { seq: c.u64()?, op: FileOp::SetLen { path: c.string()?, len: c.u64()? } },
        OP_REMOVE => Frame::Op { seq: c.u64()?, op: FileOp::Remove { path: c.string()? } },
        OP_RENAME => Frame::Op { seq: c.u64()?, op: FileOp::Rename { from: c.string()?, to: c.string()? } },
        CAUGHT_UP => Frame::CaughtUp { seq: c.u64()? },
        ACK => Frame::Ack { seq: c.u64()? },
        _ => return Err(invalid("unknown frame kind")),
    };
    if c.at != c.bytes.len() {
        return Err(invalid("trailing bytes in frame"));
    }
    Ok(frame)
}

struct Cursor {
    bytes: Bytes,
    at: usize,
}

impl Cursor {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| invalid("frame too short"))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| invalid("u64"))?))
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().map_err(|_| invalid("u32"))?))
    }
    fn string(&mut self) -> io::Result<String> {
        let len = u16::from_be_bytes(self.take(2)?.try_into().map_err(|_| invalid("u16"))?) as usize;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| invalid("path is not UTF-8"))
    }
    fn rest(&mut self) -> Bytes {
        let rest = self.bytes.slice(self.at..);
        self.at = self.bytes.len();
        rest
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("replication frame: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(frame: Frame) {
        let mut buf = Vec::new();
        encode(&frame, &mut buf);
        assert_eq!(read_frame(&mut buf.as_slice()).unwrap(), frame);
    }

    #[test]
    fn every_frame_round_trips() {
        round_trip(Frame::Hello { term: 7, leader: "n1".into() });
        round_trip(Frame::Manifest(vec![FileDigest { path: "messages/1.seg".into(), len: 9, crc: 3 }]));
        let data = Bytes::from_static(b"abc");
        round_trip(Frame::Op { seq: 1, op: FileOp::Write { path: "a".into(), offset: 5, data } });
        round_trip(Frame::Op { seq: 2, op: FileOp::Create { path: "a".into() } });
        round_trip(Frame::Op { seq: 3, op: FileOp::SetLen { path: "a".into(), len: 0 } });
        round_trip(Frame::Op { seq: 4, op: FileOp::Remove { path: "a".into() } });
        round_trip(Frame::Op { seq: 5, op: FileOp::Rename { from: "a.tmp".into(), to: "a".into() } });
        round_trip(Frame::CaughtUp { seq: 5 });
        round_trip(Frame::Ack { seq: 5 });
    }

    /// A reader that yields a few bytes at a time and times out between them.
    struct Trickle(Vec<u8>, usize, bool);
    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.2 = !self.2;
            if self.2 {
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "timeout"));
            }
            let n = 3.min(self.0.len() - self.1).min(out.len());
            out[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    #[test]
    fn timeouts_mid_frame_lose_no_bytes() {
        let mut buf = Vec::new();
        let frames = [Frame::Hello { term: 3, leader: "n1".into() }, Frame::Ack { seq: 99 }];
        for frame in &frames {
            encode(frame, &mut buf);
        }
        let total = buf.len();
        let mut reader = FrameReader::new(Trickle(buf, 0, false));
        let mut got = Vec::new();
        for _ in 0..2 * total + 4 {
            if let Ok(Some(frame)) = reader.next_frame() {
                got.push(frame);
            }
        }
        assert_eq!(got, frames);
    }

    #[test]
    fn truncated_or_oversized_frames_are_invalid_data() {
        let mut buf = Vec::new();
        encode(&Frame::Hello { term: 7, leader: "n1".into() }, &mut buf);
        buf[3] -= 2; // claims a shorter body: the string runs past it
        assert_eq!(read_frame(&mut &buf[..buf.len() - 2]).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let huge = ((FRAME_BYTES_MAX + 1) as u32).to_be_bytes();
        assert_eq!(read_frame(&mut huge.as_slice()).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
