//! The replication protocol's frames and their encoding (docs/clustering.md "Replication").
//!
//! ```text
//! frame   = length:u32 (of kind + payload) kind:u8 payload
//! sealed  = length:u32 (of the rest) seq:u64 kind:u8 payload tag:[u8; 32]   (auth.rs)
//! string  = length:u16 utf-8 bytes
//! handshake, with a cluster secret (plain frames, each at most HANDSHAKE_FRAME_BYTES_MAX):
//!   leader → follower: AuthHello{term, leader, follower, nonce} · AuthProof{proof}
//!   follower → leader: AuthChallenge{nonce, proof}
//! handshake, with replication TLS only (inside TLS): leader → follower: Hello{term, leader}
//! then (sealed when there is a secret):
//!   leader → follower: Op{seq, op} (seq 0: catch-up) · CaughtUp{seq} · Heartbeat (when idle)
//!   follower → leader: Manifest[{path, len, crc32c}] · Ack{seq}
//! ```
//!
//! A reader takes at most [`HANDSHAKE_FRAME_BYTES_MAX`] per frame until it is told the peer is
//! authenticated ([`FrameReader::authenticated`]): a stranger's length prefix is refused before
//! anything is allocated for it.
//!
//! The leader replicates *file operations* of its data directory (create, write at an offset,
//! set length, remove, rename), so a follower's directory is byte for byte the leader's and a
//! promoted follower recovers it exactly as a restarted broker recovers its own.

use std::io::{self, Read, Write};

use bytes::Bytes;

use crate::repl::auth::{self, Challenge, Hello as AuthHello, Nonce, Opener, Proof, Sealer};

/// The largest frame a peer may send before it is authenticated: the largest handshake frame
/// (an auth hello with two names of `auth::NAME_BYTES_MAX` and a nonce, ~560 bytes) fits.
pub const HANDSHAKE_FRAME_BYTES_MAX: usize = 1024;
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
    /// The first frame with replication TLS and no secret (the peer is known by its certificate).
    Hello {
        term: u64,
        leader: String,
    },
    AuthHello(AuthHello),
    AuthChallenge(Challenge),
    AuthProof(Proof),
    Manifest(Vec<FileDigest>),
    Op {
        seq: u64,
        op: FileOp,
    },
    CaughtUp {
        seq: u64,
    },
    Ack {
        seq: u64,
    },
    /// leader → follower, while no op has gone out for a while: answered with an `Ack`, so the
    /// leader hears from a follower even when nothing is written (a silent path is seen in one
    /// lag timeout, whatever the traffic).
    Heartbeat,
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
const AUTH_HELLO: u8 = 10;
const AUTH_CHALLENGE: u8 = 11;
const AUTH_PROOF: u8 = 12;
const HEARTBEAT: u8 = 13;

/// Appends `frame`'s encoding to `out`.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    encode_body(frame, out);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Appends `frame`'s kind and payload (no length) to `out`.
fn encode_body(frame: &Frame, out: &mut Vec<u8>) {
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
        Frame::Heartbeat => out.push(HEARTBEAT),
        Frame::AuthHello(hello) => {
            out.push(AUTH_HELLO);
            out.extend_from_slice(&hello.term.to_be_bytes());
            put_str(out, &hello.leader);
            put_str(out, &hello.follower);
            out.extend_from_slice(&hello.nonce.0);
        }
        Frame::AuthChallenge(challenge) => {
            out.push(AUTH_CHALLENGE);
            out.extend_from_slice(&challenge.nonce.0);
            out.extend_from_slice(&challenge.proof);
        }
        Frame::AuthProof(proof) => {
            out.push(AUTH_PROOF);
            out.extend_from_slice(&proof.proof);
        }
    }
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

/// Writes frames, sealed (auth.rs) once [`FrameWriter::seal_with`] gave it the connection's key.
pub struct FrameWriter<W> {
    inner: W,
    sealer: Option<Sealer>,
    buf: Vec<u8>,
}

impl<W: Write> FrameWriter<W> {
    pub fn new(inner: W) -> FrameWriter<W> {
        FrameWriter { inner, sealer: None, buf: Vec::new() }
    }

    /// Every later frame is sealed with `sealer`.
    pub fn seal_with(&mut self, sealer: Sealer) {
        self.sealer = Some(sealer);
    }

    /// Writes one frame (buffered by the inner writer; see [`FrameWriter::flush`]).
    pub fn send(&mut self, frame: &Frame) -> io::Result<()> {
        self.buf.clear();
        self.buf.extend_from_slice(&[0; 4]);
        match &mut self.sealer {
            None => encode_body(frame, &mut self.buf),
            Some(sealer) => {
                self.buf.extend_from_slice(&[0; auth::SEQ_BYTES]);
                encode_body(frame, &mut self.buf);
                let tag = sealer.seal(&mut self.buf[4..]);
                self.buf.extend_from_slice(&tag);
            }
        }
        let len = (self.buf.len() - 4) as u32;
        self.buf[..4].copy_from_slice(&len.to_be_bytes());
        self.inner.write_all(&self.buf)?;
        if self.buf.capacity() > 1 << 20 {
            // A large write op passed through: do not keep megabytes per connection.
            self.buf = Vec::new();
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
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
///
/// Until [`FrameReader::authenticated`] a frame may be at most [`HANDSHAKE_FRAME_BYTES_MAX`];
/// after it, [`FRAME_BYTES_MAX`], and with an opener every frame must be sealed.
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    frame_bytes_max: usize,
    opener: Option<Opener>,
}

/// Bytes read from the socket at a time (and so at most buffered past a frame's end).
const READ_CHUNK_BYTES: usize = 64 * 1024;

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader {
            inner,
            buf: Vec::new(),
            start: 0,
            frame_bytes_max: HANDSHAKE_FRAME_BYTES_MAX,
            opener: None,
        }
    }

    /// The peer has proven who it is: frames up to [`FRAME_BYTES_MAX`] from now on, each opened
    /// (checked and numbered) by `opener` when the connection has a secret.
    pub fn authenticated(&mut self, opener: Option<Opener>) {
        self.frame_bytes_max = FRAME_BYTES_MAX;
        self.opener = opener;
    }

    /// The length of the whole frame at the front of the buffer, if it is all there. The length
    /// prefix is checked as soon as it is there, before the rest is waited for.
    fn complete(&self) -> io::Result<Option<usize>> {
        let pending = &self.buf[self.start..];
        let Some(header) = pending.get(..4) else { return Ok(None) };
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let sealing = if self.opener.is_some() { auth::SEQ_BYTES + auth::TAG_BYTES } else { 0 };
        if len == 0 || len > self.frame_bytes_max + sealing {
            return Err(invalid("frame length out of bounds"));
        }
        Ok((pending.len() >= 4 + len).then_some(4 + len))
    }

    /// The frame at the front of the buffer, `total` bytes with its length: opened, decoded.
    fn take(&mut self, total: usize) -> io::Result<Frame> {
        let at = self.start;
        self.start += total;
        let raw = &self.buf[at + 4..at + total];
        let body = match &mut self.opener {
            None => Bytes::copy_from_slice(raw),
            Some(opener) => Bytes::copy_from_slice(
                opener.open(raw).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
            ),
        };
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        decode(body)
    }

    /// Reads from the socket once (unless a whole frame is buffered): the next frame if it is
    /// now all there. For handshakes under a deadline, which a peer sending a byte at a time
    /// must not stretch.
    pub fn read_once(&mut self) -> io::Result<Option<Frame>> {
        if let Some(total) = self.complete()? {
            return self.take(total).map(Some);
        }
        if !self.fill()? {
            return Ok(None);
        }
        match self.complete()? {
            Some(total) => self.take(total).map(Some),
            None => Ok(None),
        }
    }

    /// One read into the buffer; false when it timed out.
    fn fill(&mut self) -> io::Result<bool> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; READ_CHUNK_BYTES];
        loop {
            match self.inner.read(&mut chunk) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed")),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Ok(false)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether another whole frame is already buffered (the sender has not paused).
    pub fn has_frame(&self) -> bool {
        matches!(self.complete(), Ok(Some(_)))
    }

    /// The next frame; `None` when the read timed out first. `UnexpectedEof` when the peer closed.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        loop {
            if let Some(total) = self.complete()? {
                return self.take(total).map(Some);
            }
            if !self.fill()? {
                return Ok(None);
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
        HEARTBEAT => Frame::Heartbeat,
        AUTH_HELLO => Frame::AuthHello(AuthHello {
            term: c.u64()?,
            leader: c.string()?,
            follower: c.string()?,
            nonce: Nonce(c.array()?),
        }),
        AUTH_CHALLENGE => Frame::AuthChallenge(Challenge { nonce: Nonce(c.array()?), proof: c.array()? }),
        AUTH_PROOF => Frame::AuthProof(Proof { proof: c.array()? }),
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
    fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        self.take(N)?.try_into().map_err(|_| invalid("fixed-size field"))
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
        round_trip(Frame::Heartbeat);
        let nonce = Nonce([7; auth::NONCE_BYTES]);
        round_trip(Frame::AuthHello(AuthHello {
            term: 9,
            leader: "n1".into(),
            follower: "n2".into(),
            nonce,
        }));
        round_trip(Frame::AuthChallenge(Challenge { nonce, proof: [3; auth::TAG_BYTES] }));
        round_trip(Frame::AuthProof(Proof { proof: [4; auth::TAG_BYTES] }));
    }

    /// The largest handshake frame fits under the unauthenticated limit.
    #[test]
    fn the_largest_auth_hello_fits_the_handshake_limit() {
        let name = "n".repeat(auth::NAME_BYTES_MAX);
        let hello = AuthHello { term: u64::MAX, leader: name.clone(), follower: name, nonce: Nonce([0; 32]) };
        let mut buf = Vec::new();
        encode(&Frame::AuthHello(hello), &mut buf);
        assert!(buf.len() - 4 <= HANDSHAKE_FRAME_BYTES_MAX, "{} bytes", buf.len());
    }

    /// A source that yields `prefix`, then zeros for ever.
    struct Endless(Vec<u8>, usize);
    impl Read for Endless {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = out.len().min(4096);
            for byte in &mut out[..n] {
                *byte = self.0.get(self.1).copied().unwrap_or(0);
                self.1 += 1;
            }
            Ok(n)
        }
    }

    /// Before authentication a length prefix over the handshake limit — a stranger announcing a
    /// 30 MiB frame — is refused on the first read, with nothing allocated for it.
    #[test]
    fn an_unauthenticated_huge_length_prefix_is_refused_before_buffering() {
        let mut reader = FrameReader::new(Endless((30u32 << 20).to_be_bytes().to_vec(), 0));
        assert_eq!(reader.next_frame().unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(reader.buf.capacity() <= READ_CHUNK_BYTES, "{} bytes buffered", reader.buf.capacity());
        assert!(reader.inner.1 <= READ_CHUNK_BYTES, "read {} bytes", reader.inner.1);
        let just_over = ((HANDSHAKE_FRAME_BYTES_MAX + 1) as u32).to_be_bytes().to_vec();
        assert!(FrameReader::new(Endless(just_over, 0)).next_frame().is_err());
    }

    fn session_keys() -> (auth::SessionKeys, auth::Authenticated) {
        let secret = auth::ClusterSecret::from_bytes(b"the cluster's shared secret").unwrap();
        let (leader, hello) =
            auth::LeaderAwaitingChallenge::start(&secret, "n1", "n2", 3, Nonce([1; 32])).unwrap();
        let (follower, challenge) =
            auth::FollowerAwaitingProof::handle_hello(&secret, "n2", hello, Nonce([2; 32])).unwrap();
        let (proof, keys) = leader.handle_challenge(&challenge).unwrap();
        (keys, follower.handle_proof(&proof).unwrap())
    }

    /// Sealed frames written by one side are read by the other, a byte at a time too; a flipped
    /// bit or a replayed frame on the wire ends the stream with InvalidData.
    #[test]
    fn sealed_frames_round_trip_and_altered_or_replayed_ones_are_refused() {
        let (leader, follower) = session_keys();
        let mut writer = FrameWriter::new(Vec::new());
        writer.seal_with(leader.seal);
        let data = Bytes::from(vec![5u8; 100_000]);
        let frames = [
            Frame::Op { seq: 1, op: FileOp::Write { path: "messages/1.seg".into(), offset: 0, data } },
            Frame::CaughtUp { seq: 1 },
        ];
        for frame in &frames {
            writer.send(frame).unwrap();
        }
        let wire = writer.inner.clone();
        let mut reader = FrameReader::new(Trickle(wire.clone(), 0, false));
        reader.authenticated(Some(follower.keys.open));
        let mut got = Vec::new();
        for _ in 0..2 * wire.len() + 4 {
            if let Ok(Some(frame)) = reader.next_frame() {
                got.push(frame);
            }
        }
        assert_eq!(got, frames);

        let (_, follower) = session_keys();
        let mut altered = wire.clone();
        altered[20] ^= 1;
        let mut reader = FrameReader::new(altered.as_slice());
        reader.authenticated(Some(follower.keys.open));
        assert_eq!(reader.next_frame().unwrap_err().kind(), io::ErrorKind::InvalidData);

        let (_, follower) = session_keys();
        let first_len = 4 + u32::from_be_bytes(wire[..4].try_into().unwrap()) as usize;
        let replayed = [&wire[..first_len], &wire[..first_len]].concat();
        let mut reader = FrameReader::new(replayed.as_slice());
        reader.authenticated(Some(follower.keys.open));
        assert!(reader.next_frame().unwrap().is_some());
        assert_eq!(reader.next_frame().unwrap_err().kind(), io::ErrorKind::InvalidData);
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
