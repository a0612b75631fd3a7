//! Catch-up: what a follower has (its manifest), and the plan that brings it to the leader's files
//! as they stood at one op sequence.
//!
//! Segment files only grow at their end (the store never rewrites a byte below its tail), so a
//! follower whose copy is a prefix of the leader's — same CRC32C over its length — needs only the
//! rest. A copy that is longer, or whose bytes differ (a follower that was leader and wrote what
//! never got confirmed), is replaced whole. Files the leader does not have are removed.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

use crate::repl::digests::FileDigests;
use crate::repl::frame::FileDigest;

/// The data directory's lock file: never replicated (each node holds its own).
pub const LOCK_FILE: &str = "hourglass.lock";
/// The message log's directory inside the data directory.
pub const MESSAGES_DIR: &str = "messages";

/// Whether `path` names a file the replication may touch: `NAME` or `messages/NAME`, nothing
/// that climbs out of the data directory, never the lock file.
pub fn valid_path(path: &str) -> bool {
    let name = path.strip_prefix("messages/").unwrap_or(path);
    !name.is_empty()
        && !name.contains('/')
        && !name.contains('\\')
        && name != "."
        && name != ".."
        && path != LOCK_FILE
}

/// Every replicated file of the data directory `dir`, with its length and CRC32C: as `digests`
/// knows it, or read (and known from then on).
pub fn local_manifest(dir: &Path, digests: &FileDigests) -> io::Result<Vec<FileDigest>> {
    let mut files = Vec::new();
    for (sub, prefix) in [(dir.to_path_buf(), ""), (dir.join(MESSAGES_DIR), "messages/")] {
        let entries = match fs::read_dir(&sub) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let path = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if !valid_path(&path) {
                continue;
            }
            let (len, crc) = digests.whole(&path, &entry.path(), entry.metadata()?.len())?;
            files.push(FileDigest { path, len, crc });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// Length and CRC32C of the first `limit` bytes of the file at `path` (all of it if shorter).
pub fn digest(path: &Path, limit: u64) -> io::Result<(u64, u32)> {
    let mut file = fs::File::open(path)?.take(limit);
    let mut buf = vec![0u8; 1 << 20];
    let (mut len, mut crc) = (0u64, 0u32);
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok((len, crc));
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        len += n as u64;
    }
}

/// A leader's file at the catch-up point: its length then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderFile {
    pub path: String,
    pub len: u64,
}

/// One step of a catch-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send bytes `from..to` of `path`; `replace`: the follower empties (or creates) it first.
    Send {
        path: String,
        from: u64,
        to: u64,
        replace: bool,
    },
    Remove {
        path: String,
    },
}

/// The steps that turn the follower's files into the leader's. `leader_prefix_crc(path, len)`
/// is the CRC32C of the leader file's first `len` bytes.
pub fn plan_catch_up(
    leader: &[LeaderFile],
    follower: &[FileDigest],
    mut leader_prefix_crc: impl FnMut(&str, u64) -> io::Result<u32>,
) -> io::Result<Vec<Step>> {
    let mut steps = Vec::new();
    for theirs in follower {
        if !leader.iter().any(|mine| mine.path == theirs.path) {
            steps.push(Step::Remove { path: theirs.path.clone() });
        }
    }
    for mine in leader {
        let theirs = follower.iter().find(|theirs| theirs.path == mine.path);
        let keep = match theirs {
            Some(theirs) if theirs.len <= mine.len => {
                leader_prefix_crc(&mine.path, theirs.len)? == theirs.crc
            }
            _ => false,
        };
        let (from, replace) = match theirs {
            Some(theirs) if keep => (theirs.len, false),
            _ => (0, true),
        };
        if replace || from < mine.len {
            steps.push(Step::Send { path: mine.path.clone(), from, to: mine.len, replace });
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crc_of<'a>(contents: &'a [(&'a str, &'a [u8])]) -> impl FnMut(&str, u64) -> io::Result<u32> + 'a {
        move |path, len| {
            let (_, bytes) = contents.iter().find(|(p, _)| *p == path).expect("leader file");
            Ok(crc32c::crc32c(&bytes[..len as usize]))
        }
    }

    fn leader_file(path: &str, len: usize) -> LeaderFile {
        LeaderFile { path: path.into(), len: len as u64 }
    }

    fn follower_file(path: &str, bytes: &[u8]) -> FileDigest {
        FileDigest { path: path.into(), len: bytes.len() as u64, crc: crc32c::crc32c(bytes) }
    }

    #[test]
    fn a_follower_holding_a_prefix_gets_only_the_rest() {
        let leader: &[u8] = b"0123456789";
        let steps = plan_catch_up(
            &[leader_file("messages/1.seg", 10)],
            &[follower_file("messages/1.seg", b"0123")],
            crc_of(&[("messages/1.seg", leader)]),
        )
        .unwrap();
        assert_eq!(
            steps,
            vec![Step::Send { path: "messages/1.seg".into(), from: 4, to: 10, replace: false }]
        );
    }

    #[test]
    fn a_diverged_or_longer_copy_is_replaced_whole() {
        let leader: &[u8] = b"0123456789";
        let contents = [("a.seg", leader), ("b.seg", leader)];
        let steps = plan_catch_up(
            &[leader_file("a.seg", 10), leader_file("b.seg", 10)],
            // a: same length, other bytes (written by an old leader, never confirmed); b: longer.
            &[follower_file("a.seg", b"0123X"), follower_file("b.seg", b"0123456789AB")],
            crc_of(&contents),
        )
        .unwrap();
        assert_eq!(
            steps,
            vec![
                Step::Send { path: "a.seg".into(), from: 0, to: 10, replace: true },
                Step::Send { path: "b.seg".into(), from: 0, to: 10, replace: true },
            ]
        );
    }

    #[test]
    fn files_the_leader_lacks_are_removed_and_equal_ones_left_alone() {
        let leader: &[u8] = b"abc";
        let steps = plan_catch_up(
            &[leader_file("definitions.snap", 3)],
            &[follower_file("definitions.snap", b"abc"), follower_file("messages/7.seg", b"old")],
            crc_of(&[("definitions.snap", leader)]),
        )
        .unwrap();
        assert_eq!(steps, vec![Step::Remove { path: "messages/7.seg".into() }]);
    }

    #[test]
    fn paths_stay_inside_the_data_directory() {
        assert!(valid_path("definitions.snap") && valid_path("messages/00000001.seg"));
        for bad in ["", "..", "messages/..", "../x", "messages/a/b", "/etc/passwd", LOCK_FILE, "a\\b"] {
            assert!(!valid_path(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_manifest_lists_both_directories_without_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("definitions.snap"), b"defs").unwrap();
        fs::write(dir.path().join(LOCK_FILE), b"").unwrap();
        fs::create_dir(dir.path().join(MESSAGES_DIR)).unwrap();
        fs::write(dir.path().join("messages/00000001.seg"), b"segment").unwrap();
        let manifest = local_manifest(dir.path(), &FileDigests::default()).unwrap();
        assert_eq!(
            manifest,
            vec![
                follower_file("definitions.snap", b"defs"),
                follower_file("messages/00000001.seg", b"segment")
            ]
        );
    }
}
