//! Reading a damaged catalog log past its damage, for a start that sets the catalog aside
//! (`--set-aside-damaged-definitions`, issue 37 finding 7). Pure: bytes in, the whole commits
//! before the damage and the whole commits after it out.
//!
//! Going back to the last whole commit before the damage (what this replaced) undid every
//! later change with it: a user deleted, or a password changed, after the damage was back as it
//! was. Each record is a whole value (a put of a key's whole value, a delete, a prefix delete),
//! so the commits after a damaged one apply as they did the first time: every key they touch
//! ends as it was. Only the keys the damaged commits alone touched are left as they were before
//! them (which keys those are cannot be known: their records do not read).
//!
//! Where the whole commits start again: at a valid trailer of a later commit after the bad
//! record, from which the rest of the log reads whole — to its end, or to a torn tail that
//! holds no valid trailer copy (a torn write is a prefix of one commit, and a commit whose first
//! trailer copy is whole counts: `log_scan.rs`). Looking at every offset finds trailers, but a
//! trailer found so may be bytes inside a record's value, which a client chooses (a queue
//! argument): read from there, a value could pass as commits of its own. It cannot read whole
//! to the end: the damaged commit's real trailer comes after that value, with a sequence that
//! does not follow the false commits', so the reading breaks with a valid trailer copy at or
//! after the break. Only a value that also forged checksums over every byte the log holds after
//! it, to its end, would pass. When no point reads whole to the end (damage in two places, the
//! first one's commits and those between are lost too), every commit after the first damage is
//! lost: the log is read as far as before this change.
//!
//! Cost: one pass to list the trailer copies, then each attempt reads from a candidate until it
//! breaks, and the next attempt starts at the first candidate at or past that break, so the body
//! is read about twice in all.

use super::log_scan::{
    trailer_at, trailer_copies, whole_commits, whole_commits_from, Scanned, TRAILER_BYTES,
};

/// A damaged log body read around its damage ([`resync`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Resynced<'a> {
    /// The whole commits before the damage, from commit 1.
    pub before: Scanned<'a>,
    /// What follows them when it is damage (`None`: nothing, or a torn tail).
    pub damage: Option<AfterDamage<'a>>,
}

/// The commits a damaged stretch of the log took, and the whole commits after it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct AfterDamage<'a> {
    /// Where the first bad record starts (bytes into the body).
    pub at: usize,
    /// How many commits the damage took, from `before.commits + 1`; `None` when no point after
    /// it reads whole to the end, so every later commit is lost (how many is unknown).
    pub lost_commits: Option<u64>,
    /// The whole commits after the damage (none when `lost_commits` is `None`), from commit
    /// `before.commits + lost_commits + 1`.
    pub after: Scanned<'a>,
}

/// Reads `body` (a log without its header) around its damage (module doc).
pub(super) fn resync(body: &[u8]) -> Resynced<'_> {
    let (before, stopped) = whole_commits(body);
    let copies = trailer_copies(body, stopped);
    let last = before.commits;
    // A bad record with no valid trailer of a later commit after it is a torn tail (`scan`).
    if stopped == body.len() || !copies.iter().any(|(_, t)| t.sequence > last) {
        return Resynced { before, damage: None };
    }
    // A reading stopped where no valid trailer copy is left, at or after the stop, read whole to
    // the end: what follows is nothing, or a torn tail.
    let reads_to_end = |stop: usize| copies.partition_point(|(at, _)| *at < stop) == copies.len();
    let mut next = 0;
    while let Some(&(at, trailer)) = copies.get(next) {
        let mut furthest = at + 1;
        if trailer.sequence > last {
            // This copy may be a commit's first (its twin follows) or its second (the first is
            // the damaged one): the next commit starts after the twin, or right after it.
            let twin = body.get(at + TRAILER_BYTES..).and_then(trailer_at) == Some(trailer);
            let after_twin = at + 2 * TRAILER_BYTES;
            let first = if twin { after_twin } else { at + TRAILER_BYTES };
            let resumes = std::iter::once(first).chain((!twin).then_some(after_twin));
            for resume in resumes.filter(|resume| *resume <= body.len()) {
                let (after, stop) = whole_commits_from(body, resume, trailer.sequence.saturating_add(1));
                if reads_to_end(stop) {
                    let lost_commits = Some(trailer.sequence - last);
                    return Resynced {
                        before,
                        damage: Some(AfterDamage { at: stopped, lost_commits, after }),
                    };
                }
                furthest = furthest.max(stop);
            }
        }
        // Every candidate before the break was read through (or lies inside a record read).
        next = (next + 1).max(copies.partition_point(|(at, _)| *at < furthest));
    }
    let after = Scanned { whole_bytes: stopped, ..Scanned::default() };
    Resynced { before, damage: Some(AfterDamage { at: stopped, lost_commits: None, after }) }
}

#[cfg(test)]
mod tests {
    use super::super::log_scan::{encode_trailer, record};
    use super::*;

    /// Four commits of 2, 1, 2 and 1 records; where each commit starts, and the end.
    fn four_commits() -> (Vec<u8>, Vec<usize>) {
        let mut log = Vec::new();
        let mut starts = Vec::new();
        for (sequence, records) in [(1u64, 2u32), (2, 1), (3, 2), (4, 1)] {
            starts.push(log.len());
            for r in 0..records {
                log.extend(record(format!("\x01change {sequence}.{r}").as_bytes()));
            }
            encode_trailer(sequence, records, &mut log);
        }
        starts.push(log.len());
        (log, starts)
    }

    fn texts(scanned: &Scanned<'_>) -> Vec<String> {
        scanned.records.iter().map(|r| String::from_utf8_lossy(&r[1..]).into_owned()).collect()
    }

    /// A flipped byte anywhere in a commit's records (length, checksum or body) loses that commit
    /// alone: the whole commits before it and after it read.
    #[test]
    fn a_flip_in_a_commits_records_loses_that_commit_alone() {
        let (log, starts) = four_commits();
        for commit in 0..4 {
            let records_end = starts[commit + 1] - 2 * TRAILER_BYTES;
            for at in starts[commit]..records_end {
                let mut flipped = log.clone();
                flipped[at] ^= 0x20;
                let read = resync(&flipped);
                let damage = read.damage.unwrap_or_else(|| panic!("flip at {at}: damage"));
                assert_eq!(read.before.commits, commit as u64, "flip at {at}");
                assert_eq!(damage.lost_commits, Some(1), "flip at {at}");
                assert_eq!(damage.after.commits, 3 - commit as u64, "flip at {at}");
                let all = [texts(&read.before), texts(&damage.after)].concat();
                assert!(
                    !all.iter().any(|t| t.starts_with(&format!("change {}.", commit + 1))),
                    "flip at {at}"
                );
                assert_eq!(all.len(), 6 - [2, 1, 2, 1][commit], "flip at {at}");
            }
        }
    }

    /// A whole log, or one that ends in a torn write, has no damage to read past.
    #[test]
    fn a_whole_or_torn_log_has_no_damage() {
        let (log, starts) = four_commits();
        assert_eq!(resync(&log).damage, None);
        let torn = &log[..starts[3] + 5];
        let read = resync(torn);
        assert_eq!((read.before.commits, read.damage), (3, None));
    }

    /// Three commits, the second holding a record of `value` and damaged in its first record.
    fn damaged_commit_2_holding(value: &[u8]) -> Vec<u8> {
        let mut log = record(b"\x01change 1.0");
        encode_trailer(1, 1, &mut log);
        let damaged_at = log.len();
        log.extend(record(b"\x01change 2.0"));
        log.extend(record(value));
        encode_trailer(2, 2, &mut log);
        log.extend(record(b"\x01change 3.0"));
        encode_trailer(3, 1, &mut log);
        log[damaged_at + 10] ^= 0x01;
        log
    }

    /// Issue 37 finding 7: a client's value that holds a false trailer and a false commit
    /// after it is never read as commits, even when it follows the damage in the damaged commit:
    /// the reading from the false trailer breaks at the damaged commit's real trailer, so the
    /// real commits after it are the ones read.
    #[test]
    fn a_false_commit_inside_a_value_is_never_read() {
        let mut forged = Vec::new();
        encode_trailer(2, 2, &mut forged);
        forged.extend(record(b"\x01iUeve admin"));
        encode_trailer(3, 1, &mut forged);
        let mut value = b"\x01vq/crafted ".to_vec();
        value.extend_from_slice(&forged);
        let log = damaged_commit_2_holding(&value);
        let read = resync(&log);
        let damage = read.damage.expect("damage");
        assert_eq!((read.before.commits, damage.lost_commits), (1, Some(1)));
        assert_eq!(texts(&damage.after), ["change 3.0"], "the real commit 3, not eve");
    }

    /// A trailer read back may hold any sequence, the largest too: reading on from a false one
    /// never overflows, and the real commits after the damage are still the ones read.
    #[test]
    fn a_false_trailer_of_the_largest_sequence_is_harmless() {
        let mut value = b"\x01vq/crafted ".to_vec();
        encode_trailer(u64::MAX, 0, &mut value);
        let log = damaged_commit_2_holding(&value);
        let read = resync(&log);
        let damage = read.damage.expect("damage");
        assert_eq!((read.before.commits, damage.lost_commits), (1, Some(1)));
        assert_eq!(texts(&damage.after), ["change 3.0"]);
    }

    /// Damage in two places: no point after the first reads whole to the end, so the reading
    /// resumes after the second, and everything between is lost with it.
    #[test]
    fn damage_in_two_places_resumes_after_the_second() {
        let (mut log, starts) = four_commits();
        log[starts[0] + 10] ^= 0x01;
        log[starts[2] + 10] ^= 0x01;
        let read = resync(&log);
        let damage = read.damage.expect("damage");
        assert_eq!((read.before.commits, damage.lost_commits), (0, Some(3)));
        assert_eq!(texts(&damage.after), ["change 4.0"]);
    }

    /// When every reading after the damage breaks with a valid trailer copy after it (here a
    /// stray copy of commit 1's trailer at the very end), no point reads whole to the end: the
    /// commits after the damage are lost, how many unknown, never read as if the log ended there.
    #[test]
    fn damage_with_no_whole_end_after_it_loses_the_rest() {
        let (mut log, starts) = four_commits();
        log[starts[2] + 10] ^= 0x01;
        encode_trailer(1, 2, &mut log);
        log.truncate(log.len() - TRAILER_BYTES);
        let read = resync(&log);
        let damage = read.damage.expect("damage");
        assert_eq!((read.before.commits, damage.lost_commits, damage.after.commits), (2, None, 0));
    }
}
