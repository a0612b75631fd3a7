//! Paged-out ready messages in a row, kept as one slot (issue 38: a ready backlog in flat
//! memory).
//!
//! A steady publisher fills a queue with messages that differ only by steps: each one's queue
//! seq, store id and record offset are the last one's plus a fixed stride (1 apart for one queue
//! alone; fanned out to two durable queues, 2 apart with two records' stride), and everything
//! the queue reads without the body is the same (the properties it reads, sizes, delivery count,
//! redelivered, the TTL: each one's deadline is as long after it became ready). Once the store
//! holds them and the queue pages them out, such a
//! row is one `Run`: its first message whole, the strides, and for each later message only
//! when it became ready, after a base time (`ready_times.rs`: a group per millisecond, at most 4
//! bytes a message). An entry costs 72 bytes; a message in a run a fraction of a byte when a
//! steady publisher made it (plus the store's live index, a bit a message in a row).
//!
//! A run always has at least two messages; a member is rebuilt as the entry it was
//! (`Run::member`), so taking one out gives back exactly what went in. Its members became ready
//! in order, so with a TTL their deadlines rise along it: the first expires first, and the TTL
//! index holds a key for it alone (`ttl.rs`).

use super::entry::{Entry, Paged, Payload, Seq};
use super::far_record::{decode_ready, encode_ready, NO_TIME, RECORD_BYTES};
use super::ready_times::ReadyTimes;
use super::state_bytes::{StateReader, StateWriter};
use crate::time::Timestamp;

#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// The first message, whole.
    head: Entry,
    /// The message facts every member shares (the head's), at the head's offset.
    paged: Paged,
    /// `rest`'s times are milliseconds after this.
    base: Timestamp,
    seq_step: u64,
    id_step: u64,
    offset_step: u32,
    /// When each message after the head became ready, in order, as milliseconds after `base`
    /// (never decreasing), a group per millisecond.
    rest: ReadyTimes,
    /// Each member's TTL deadline is this long after it became ready; none without one.
    ttl: Option<u64>,
}

/// What a run member must be: paged out, stored, ready since a known time, its deadline (if
/// any) no earlier. Gives its paged facts, store id, ready time and TTL.
fn facts(entry: &Entry) -> Option<(Paged, u64, Timestamp, Option<u64>)> {
    let Payload::Paged(paged) = entry.payload else { return None };
    let ready = entry.ready_at()?;
    let ttl = match entry.expires_at() {
        Some(at) => Some(at.as_millis().checked_sub(ready.as_millis())?),
        None => None,
    };
    Some((paged, entry.persist_id()?, ready, ttl))
}

impl Run {
    /// A run of `first` and `second` (`second` right after `first` in the queue), if they make
    /// one.
    pub fn pair(first: &Entry, second: &Entry) -> Option<Run> {
        let (paged, id, ready, ttl) = facts(first)?;
        let (next_paged, next_id, next_ready, next_ttl) = facts(second)?;
        if !paged.same_but_offset(&next_paged)
            || ttl != next_ttl
            || (first.delivery_count, first.redelivered) != (second.delivery_count, second.redelivered)
            || second.seq <= first.seq
            || next_id <= id
            || next_paged.offset() <= paged.offset()
        {
            return None;
        }
        let delta = u32::try_from(next_ready.as_millis().checked_sub(ready.as_millis())?).ok()?;
        Some(Run {
            head: first.clone(),
            paged,
            base: ready,
            seq_step: second.seq - first.seq,
            id_step: next_id - id,
            offset_step: next_paged.offset() - paged.offset(),
            rest: ReadyTimes::one(delta),
            ttl,
        })
    }

    /// Appends `entry` if it is the next step of this run; else gives it back.
    pub fn try_push(&mut self, entry: Entry) -> Result<(), Entry> {
        let Some((paged, id, ready, ttl)) = facts(&entry) else { return Err(entry) };
        let steps = self.rest.len() as u64;
        let fits = self.paged.same_but_offset(&paged)
            && ttl == self.ttl
            && (entry.delivery_count, entry.redelivered) == (self.head.delivery_count, self.head.redelivered)
            && Some(entry.seq) == after_step(self.head.seq, self.seq_step, steps)
            && Some(id) == after_step(self.head_id(), self.id_step, steps)
            && Some(u64::from(paged.offset()))
                == after_step(u64::from(self.paged.offset()), u64::from(self.offset_step), steps);
        let delta = ready.as_millis().checked_sub(self.base.as_millis()).and_then(|d| u32::try_from(d).ok());
        // Ready in order (`push` refuses an earlier time), so that deadlines rise along the run.
        match delta {
            Some(delta) if fits && self.rest.push(delta) => Ok(()),
            _ => Err(entry),
        }
    }

    /// Messages in the run (at least 2).
    pub fn len(&self) -> usize {
        self.rest.len() + 1
    }

    pub fn head(&self) -> &Entry {
        &self.head
    }

    /// Gives every member a deadline `ttl` after it became ready (or none).
    pub fn set_ttl(&mut self, ttl: Option<u64>) {
        self.ttl = ttl;
        let ready = self.head.ready_at();
        self.head.set_expires_at(ttl.and_then(|ttl| Some(ready?.saturating_add_millis(ttl))));
    }

    pub fn first_seq(&self) -> Seq {
        self.head.seq
    }

    /// The last member's TTL deadline, if the members have one.
    pub fn last_deadline(&self) -> Option<Timestamp> {
        let last = self.base.saturating_add_millis(u64::from(self.rest.last()?));
        Some(last.saturating_add_millis(self.ttl?))
    }

    pub fn last_seq(&self) -> Seq {
        self.head.seq + self.rest.len() as u64 * self.seq_step
    }

    /// Where member `seq` is in the run, if it is one.
    pub fn position(&self, seq: Seq) -> Option<usize> {
        let from_head = seq.checked_sub(self.head.seq)?;
        let at = usize::try_from(from_head / self.seq_step).ok()?;
        (from_head % self.seq_step == 0 && at < self.len()).then_some(at)
    }

    /// How many members come before `seq` (which need not be a member).
    pub fn count_before(&self, seq: Seq) -> usize {
        match seq.checked_sub(self.head.seq) {
            None | Some(0) => 0,
            Some(from_head) => {
                usize::try_from((from_head - 1) / self.seq_step + 1).map_or(self.len(), |n| n.min(self.len()))
            }
        }
    }

    /// Member `at` (0 is the head) as the entry it was.
    pub fn member(&self, at: usize) -> Entry {
        if at == 0 {
            return self.head.clone();
        }
        let steps = at as u64;
        let offset = u64::from(self.paged.offset()) + steps * u64::from(self.offset_step);
        // Every member's offset was a u32 when it joined.
        let paged = self.paged.at_offset(offset as u32);
        let ready = self.base.saturating_add_millis(u64::from(self.rest.get(at - 1)));
        let mut entry = Entry::with_payload(
            self.head.seq + steps * self.seq_step,
            Payload::Paged(paged),
            Some(ready),
            self.ttl.map(|ttl| ready.saturating_add_millis(ttl)),
            Some(self.head_id() + steps * self.id_step),
        );
        entry.delivery_count = self.head.delivery_count;
        entry.redelivered = self.head.redelivered;
        entry
    }

    /// Takes the head out; the run keeps the rest (at least one).
    pub fn take_head(&mut self) -> Entry {
        let next = self.member(1);
        self.rest.pop_front();
        if let Payload::Paged(paged) = next.payload {
            self.paged = paged;
        }
        std::mem::replace(&mut self.head, next)
    }

    /// Splits off the members from `at` on (`0 < at < len`) as a run of their own, or a single
    /// entry; this run keeps the members before `at`.
    pub fn split_off(&mut self, at: usize) -> Result<Run, Entry> {
        let head = self.member(at);
        // `rest[i]` is member `i + 1`'s: the tail's head is `rest[at - 1]`, this run keeps the
        // times before it.
        let mut rest = self.rest.split_off(at - 1);
        rest.pop_front();
        let Payload::Paged(paged) = head.payload else { unreachable!("members are paged") };
        if rest.is_empty() {
            return Err(head);
        }
        let (base, seq_step, id_step, offset_step) =
            (self.base, self.seq_step, self.id_step, self.offset_step);
        Ok(Run { head, paged, base, seq_step, id_step, offset_step, rest, ttl: self.ttl })
    }

    /// Every member's seq, in order.
    pub fn seqs(&self) -> impl Iterator<Item = Seq> + '_ {
        (0..self.len() as u64).map(move |steps| self.head.seq + steps * self.seq_step)
    }

    /// The store ids of every member.
    pub fn persist_ids(&self) -> impl Iterator<Item = u64> + '_ {
        let first = self.head_id();
        (0..self.len() as u64).map(move |steps| first + steps * self.id_step)
    }

    /// Drops the members from `len` on (`len >= 1`; a run of one is the caller's to open).
    pub fn truncate(&mut self, len: usize) {
        self.rest.truncate(len - 1);
    }

    /// Appends the run to a queue state (`ready/checkpoint.rs`): its head as a far record, the
    /// base time, the strides, the TTL and the times.
    pub fn checkpoint(&self, out: &mut StateWriter) -> Option<()> {
        out.raw(&encode_ready(&self.head)?);
        out.u64(self.base.as_millis());
        out.u64(self.seq_step);
        out.u64(self.id_step);
        out.u64(u64::from(self.offset_step));
        out.u64(self.ttl.unwrap_or(NO_TIME));
        self.rest.checkpoint(out);
        Some(())
    }

    /// The run [`Run::checkpoint`] wrote; `None` unless its head's record checks out and every
    /// member's seq, store id and offset step forward without overflowing.
    pub fn restored(state: &mut StateReader) -> Option<Run> {
        let head = decode_ready(state.raw(RECORD_BYTES)?).ok()?;
        let base = Timestamp::from_millis(state.u64()?);
        let (seq_step, id_step) = (state.u64()?, state.u64()?);
        let offset_step = u32::try_from(state.u64()?).ok()?;
        let ttl = Some(state.u64()?).filter(|ttl| *ttl != NO_TIME);
        let rest = ReadyTimes::restored(state)?;
        let (paged, id, ready, _) = facts(&head)?;
        let steps = rest.len() as u64;
        let fits = seq_step > 0
            && id_step > 0
            && offset_step > 0
            && ready >= base
            && (steps + 1).checked_mul(head.body_size() as u64).is_some()
            && after_step(head.seq, seq_step, steps - 1).is_some()
            && after_step(id, id_step, steps - 1).is_some()
            && after_step(u64::from(paged.offset()), u64::from(offset_step), steps - 1)
                .is_some_and(|last| u32::try_from(last).is_ok());
        fits.then_some(Run { head, paged, base, seq_step, id_step, offset_step, rest, ttl })
    }

    /// Whether a member has store id `id`.
    pub fn holds_persist_id(&self, id: u64) -> bool {
        id.checked_sub(self.head_id()).is_some_and(|from_head| {
            from_head % self.id_step == 0 && from_head / self.id_step < self.len() as u64
        })
    }

    /// The first and last members' store ids.
    pub fn persist_id_range(&self) -> (u64, u64) {
        (self.head_id(), self.head_id() + self.rest.len() as u64 * self.id_step)
    }

    fn head_id(&self) -> u64 {
        // Every member is stored (`facts`).
        self.head.persist_id().unwrap_or_default()
    }
}

/// The value `steps + 1` strides of `step` after `first`: the next member's, `steps` being how
/// many follow the head.
fn after_step(first: u64, step: u64, steps: u64) -> Option<u64> {
    first.checked_add(step.checked_mul(steps + 1)?)
}
