//! Checkpoints (ADR 0018): the live index as of a position in the log, so that a restart reads
//! the checkpoint and the log after it instead of the whole log.
//!
//! When the log rotates into segment `S`, the index then describes exactly the records before
//! `S`: it is encoded at that moment, and written when the commit that creates `S` has made
//! every record before `S` durable (`messages/index.ckpt`, replaced atomically through
//! [`crate::snapshot`], so a crash leaves the old checkpoint or the new one). With it, recovery's
//! first pass:
//! - reads every segment from `S` on as before (torn tails, damage, claims);
//! - reads a segment before `S` again only if it holds an update record (the index keeps no
//!   metadata): its updates whose message is still live at a later enqueue are applied;
//! - takes every other segment before `S` as the checkpoint knew it (its valid length and what
//!   the next header records of it), without reading it;
//! - forgets what lay in segments the checkpoint named that are no longer on disk: compaction
//!   deletes a segment only once nothing live lies in it and every segment its settles refer to
//!   is gone, so a missing segment's messages were settled, even if the settles went too.
//!
//! The second pass is unchanged: it reads every live record back and verifies it again.
//!
//! A checkpoint is derived from the log and never required: one that is missing, damaged, of
//! another schema, or inconsistent with the segments on disk is ignored (and said so in the
//! recovery report), and recovery reads the whole log as it always did.
//!
//! Cost: encoding the index is a walk over it on the store thread, at most once per rotation and
//! only after the log has grown by twice the last checkpoint's size since it (so checkpoints
//! cost at most half the log's own writes); an index whose encoding is over half of
//! [`SNAPSHOT_BYTES_MAX`] (128 MiB) is not checkpointed, and the next start reads the whole log.
//! Queue states (`queue_states.rs`) fill the rest of [`CHECKPOINT_BYTES_MAX`] (1 GiB), smallest
//! first; their kept parts lie in pack files (`state_packs.rs`, ADR 0020), each written once, and
//! count against the bytes a checkpoint may write only when they are new.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::index::LiveIndex;
use crate::limits::{CHECKPOINT_BYTES_MAX, SNAPSHOT_BYTES_MAX};
use crate::queue_states::{self, Planned, QueueCheckpoint, StoredState};
use crate::record::SegmentEnd;
use crate::snapshot::{read_snapshot_up_to, write_snapshot_parts};
use crate::state_packs::Registry;
use crate::storage::{Storage, StorageFile};
use crate::varint::{self, Malformed, Reader};

/// The checkpoint's file name in the message log's directory.
pub const CHECKPOINT_FILE: &str = "index.ckpt";
/// The payload's layout (the snapshot container's schema version): 3 names the states' kept parts
/// in packs; 2 (each state whole, in place) and 1 (the index alone) are still read.
const SCHEMA: u32 = 3;
const SCHEMA_WHOLE_STATES: u32 = 2;
const SCHEMA_WITHOUT_STATES: u32 = 1;

/// A segment before the checkpoint's position, as recovery would find it by reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KnownSegment {
    /// Records end here.
    pub(crate) valid_bytes: u64,
    /// What the next segment's header records of it.
    pub(crate) end: SegmentEnd,
}

/// A checkpoint read back.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    /// Records from the start of this segment on are not in it.
    pub(crate) replay_from: u64,
    /// Every segment before `replay_from` on disk when it was written.
    pub(crate) known: BTreeMap<u64, KnownSegment>,
    pub(crate) index: LiveIndex,
    /// Queue states taken with it (`queue_states.rs`), their kept parts read from their packs.
    pub(crate) states: Vec<StoredState>,
    /// States left out because a part of theirs did not read back from its pack.
    pub(crate) states_left_out: u64,
    /// The kept parts read, known where they lie, so the next checkpoint names them again.
    pub(crate) known_parts: Registry,
}

/// What recovery found of a checkpoint.
#[derive(Debug)]
pub(crate) enum Found {
    None,
    Usable(Checkpoint),
    /// Present and not used; why.
    Ignored(String),
}

/// Reads the checkpoint and checks it against the segment files on disk (ascending).
pub(crate) fn load(storage: &dyn Storage, files: &[(u64, Box<dyn StorageFile>)]) -> Found {
    let snapshot = match read_snapshot_up_to(storage, CHECKPOINT_FILE, CHECKPOINT_BYTES_MAX) {
        Ok(Some(snapshot)) => snapshot,
        Ok(None) => return Found::None,
        Err(error) => return Found::Ignored(error.to_string()),
    };
    let layout = match snapshot.schema_version {
        SCHEMA => States::InPacks,
        SCHEMA_WHOLE_STATES => States::Whole,
        SCHEMA_WITHOUT_STATES => States::None,
        other => return Found::Ignored(format!("schema {other} (this build reads {SCHEMA})")),
    };
    let Ok(checkpoint) = decode(storage, &snapshot.payload, layout) else {
        return Found::Ignored("its contents do not decode".to_owned());
    };
    if files.last().is_none_or(|(last, _)| *last < checkpoint.replay_from) {
        // The segment it was written with is created before it: a log without it is not the one.
        return Found::Ignored(format!("segment {} is not on disk", checkpoint.replay_from));
    }
    for (seq, file) in files.iter().take_while(|(seq, _)| *seq < checkpoint.replay_from) {
        let Some(known) = checkpoint.known.get(seq) else {
            return Found::Ignored(format!("segment {seq} is on disk and not in it"));
        };
        // A segment cut short since: the whole log is read, whose rules count what was lost.
        match file.len_bytes() {
            Ok(bytes) if bytes >= known.valid_bytes => {}
            Ok(bytes) => {
                let had = known.valid_bytes;
                return Found::Ignored(format!(
                    "segment {seq} is {bytes} bytes, shorter than the {had} it knew"
                ));
            }
            Err(error) => return Found::Ignored(format!("segment {seq} could not be sized: {error}")),
        }
    }
    Found::Usable(checkpoint)
}

/// How a checkpoint holds the queue states.
#[derive(Clone, Copy, PartialEq, Eq)]
enum States {
    None,
    Whole,
    InPacks,
}

fn decode(storage: &dyn Storage, payload: &Bytes, layout: States) -> Result<Checkpoint, Malformed> {
    let mut input = Reader::new(payload);
    let replay_from = input.u64()?;
    let mut known = BTreeMap::new();
    for _ in 0..input.count()? {
        let seq = input.u64()?;
        let valid_bytes = input.u64()?;
        let end = SegmentEnd { bytes: input.u64()?, records: input.u64()? };
        if seq >= replay_from || known.insert(seq, KnownSegment { valid_bytes, end }).is_some() {
            return Err(Malformed);
        }
    }
    let index = LiveIndex::decode(&mut input)?;
    let named = match layout {
        States::None => Vec::new(),
        _ => queue_states::decode(&mut input, payload, layout == States::Whole)?,
    };
    if !input.is_empty() || index.segment_sequences().any(|seq| !known.contains_key(&seq)) {
        return Err(Malformed);
    }
    let mut known_parts = Registry::default();
    let (states, states_left_out) = queue_states::read_packs(named, storage, &mut known_parts);
    Ok(Checkpoint { replay_from, known, index, states, states_left_out, known_parts })
}

/// The store's side: when to checkpoint, and the checkpoint waiting for its commit.
#[derive(Debug)]
pub(crate) struct Checkpoints {
    pending: Option<Pending>,
    /// Record bytes appended since the last checkpoint was encoded.
    appended_since: u64,
    /// Bytes the last checkpoint wrote (its file and its pack).
    last_bytes: u64,
    pub(crate) written: u64,
    pub(crate) failed: u64,
    /// Checkpoints are taken only when the queues' owner asks, with their states
    /// (`Store::checkpoint_with`), not at rotations on the store's own account.
    on_request_only: bool,
    /// The most a checkpoint written here may write (its file and its pack):
    /// [`CHECKPOINT_BYTES_MAX`], or less where files are replicated
    /// (`Store::limit_checkpoint_bytes`).
    bytes_max: u64,
    /// The states' kept parts written to packs (`state_packs.rs`).
    known_parts: Registry,
}

/// A checkpoint encoded at a rotation into `replay_from`, to be written once that segment is
/// created (every record before it durable).
#[derive(Debug)]
struct Pending {
    replay_from: u64,
    /// The index, encoded.
    index: Vec<u8>,
    /// The states it takes, and the pack of their parts not written yet.
    states: Planned,
}

impl Checkpoints {
    /// Checkpoints after a start that found `known_parts` in the packs.
    pub(crate) fn new(known_parts: Registry) -> Self {
        // The first rotation after a start checkpoints: the log read at the start may be long.
        Self {
            pending: None,
            appended_since: u64::MAX,
            last_bytes: 0,
            written: 0,
            failed: 0,
            on_request_only: false,
            bytes_max: CHECKPOINT_BYTES_MAX,
            known_parts,
        }
    }

    pub(crate) fn appended(&mut self, bytes: u64) {
        self.appended_since = self.appended_since.saturating_add(bytes);
    }

    /// The log rotates into `next`: `index` describes the records before it. A checkpoint is
    /// encoded now: with `requested` states (the queues' owner asked, and one is due: the states
    /// that do not agree with the index are left out), or on the store's own account if the log
    /// grew enough since the last one and the owner does not ask. A later rotation's replaces
    /// one not yet written.
    pub(crate) fn on_rotation(
        &mut self,
        next: u64,
        index: &LiveIndex,
        requested: Option<Vec<QueueCheckpoint>>,
    ) {
        match requested {
            Some(states) => self.take(next, index, queue_states::agreeing(states, index)),
            None if !self.on_request_only && self.is_due() => self.take(next, index, Vec::new()),
            None => {}
        }
    }

    /// Checkpoints written from now on write at most `bytes_max` (within
    /// [`CHECKPOINT_BYTES_MAX`]): the queue states whose new bytes do not fit are left out.
    pub(crate) fn limit_bytes(&mut self, bytes_max: u64) {
        self.bytes_max = bytes_max.min(CHECKPOINT_BYTES_MAX);
    }

    /// From now on checkpoints are taken only when asked for.
    pub(crate) fn on_request_only(&mut self) {
        self.on_request_only = true;
    }

    /// Whether the log grew enough since the last checkpoint for another.
    pub(crate) fn is_due(&self) -> bool {
        self.appended_since >= self.last_bytes.saturating_mul(2)
    }

    /// Encodes the checkpoint for a rotation into `next`, to be written when it is created. Left
    /// out if the index is too large.
    fn take(&mut self, next: u64, index: &LiveIndex, states: Vec<QueueCheckpoint>) {
        let mut index_bytes = Vec::with_capacity(64);
        index.encode(&mut index_bytes);
        let index_fits = (index_bytes.len() as u64) < SNAPSHOT_BYTES_MAX / 2;
        // The known segments' table goes first: a few bytes per segment, within the 1 MiB kept.
        let used = (1 << 20) + index_bytes.len() as u64;
        let room = CHECKPOINT_BYTES_MAX.saturating_sub(used);
        let budget = self.bytes_max.saturating_sub(used);
        let states = queue_states::plan(states, &self.known_parts, room, budget);
        self.appended_since = 0;
        self.last_bytes = index_bytes.len() as u64 + states.written;
        self.pending = index_fits.then_some(Pending { replay_from: next, index: index_bytes, states });
    }

    /// Segment `created` now exists and everything before it is durable: writes the checkpoint
    /// encoded for it, if any, with `segments` (every segment file, by sequence: valid length
    /// and end): first its pack, then the checkpoint, then deletes the packs it no longer needs.
    /// A failure leaves the previous checkpoint, which stays correct, and its packs.
    pub(crate) fn on_created(
        &mut self,
        created: u64,
        storage: &dyn Storage,
        segments: impl Iterator<Item = (u64, KnownSegment)>,
    ) {
        let Some(pending) = self.pending.take_if(|p| p.replay_from == created) else {
            return;
        };
        let Planned { states, pack, offered, .. } = pending.states;
        // A pack of this name holding known parts is never written over.
        let placed = (!self.known_parts.holds_pack(created)).then(|| pack.write(storage, created));
        let Some(Ok(placed)) = placed else {
            self.failed += 1;
            return;
        };
        for (part, at) in placed {
            self.known_parts.know(part, at);
        }
        let known: Vec<(u64, KnownSegment)> = segments.filter(|(seq, _)| *seq < created).collect();
        let mut payload = Vec::with_capacity(16 + known.len() * 16);
        varint::put(&mut payload, created);
        varint::put(&mut payload, known.len() as u64);
        for (seq, segment) in known {
            for n in [seq, segment.valid_bytes, segment.end.bytes, segment.end.records] {
                varint::put(&mut payload, n);
            }
        }
        payload.extend_from_slice(&pending.index);
        let mut encoded = vec![Bytes::from(payload)];
        if queue_states::encode(states, &self.known_parts, &mut encoded).is_err() {
            self.failed += 1;
            return;
        }
        let parts: Vec<&[u8]> = encoded.iter().map(|p| &p[..]).collect();
        match write_snapshot_parts(storage, CHECKPOINT_FILE, SCHEMA, &parts, CHECKPOINT_BYTES_MAX) {
            Ok(()) => {
                self.written += 1;
                self.known_parts.keep_only(&offered);
                self.known_parts.delete_unknown_packs(storage);
            }
            Err(_) => self.failed += 1,
        }
    }
}
