//! The broker's spill files (ADR 0013, phase 1): far-future delayed messages as sorted runs of
//! records in `<data dir>/delays/`. They are not durable state (the message log is), so the
//! directory is emptied when the broker opens it and nothing here is ever synced. The directory
//! is the broker's own: one deleted under it is made again at the next write, and a plain file
//! found in its place at start is removed (issue 37; the broker serves a run it cannot write or
//! read back from memory meanwhile).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hourglass_broker::queue::SpillFiles;

/// A directory of spill files, emptied at open.
#[derive(Debug)]
pub struct SpillDir {
    dir: PathBuf,
    /// The file read last, kept open: a load, a listing's binary search and a scan read one run
    /// many times in a row, and an open per read would double the system calls.
    last_read: Mutex<Option<(String, File)>>,
}

impl SpillDir {
    /// Opens `dir`, deleting whatever an earlier run left in it (also a file in its place).
    pub fn open(dir: &Path) -> io::Result<SpillDir> {
        let removed = match fs::symlink_metadata(dir) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(dir),
            Ok(_) => fs::remove_file(dir),
            Err(e) => Err(e),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        fs::create_dir_all(dir)?;
        Ok(SpillDir { dir: dir.to_owned(), last_read: Mutex::new(None) })
    }

    /// Closes file `name` if it is the one kept open.
    fn forget(&self, name: &str) {
        if let Ok(mut last) = self.last_read.lock() {
            if last.as_ref().is_some_and(|(open, _)| open == name) {
                *last = None;
            }
        }
    }

    fn path(&self, name: &str) -> Result<PathBuf, String> {
        // Names come from the broker (`q<id>-<run>.run`); anything that could leave the
        // directory is refused rather than joined.
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(format!("bad spill file name {name:?}"));
        }
        Ok(self.dir.join(name))
    }
}

impl SpillFiles for SpillDir {
    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        let path = self.path(name)?;
        // A file written again under a name read before is a new file: never read the old one.
        self.forget(name);
        let written = match fs::write(&path, bytes) {
            // The directory was deleted under the broker: make it again (a plain file in its
            // place is not removed while running; the write fails and the run waits in memory).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&self.dir).and_then(|()| fs::write(&path, bytes))
            }
            written => written,
        };
        written.map_err(|e| format!("{}: {e}", path.display()))
    }

    fn read_at(&self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let path = self.path(name)?;
        let mut last = self.last_read.lock().map_err(|_| "spill reader poisoned".to_owned())?;
        if last.as_ref().is_none_or(|(open, _)| open != name) {
            let file = File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            *last = Some((name.to_owned(), file));
        }
        let Some((_, file)) = last.as_ref() else { return Err("no spill file open".to_owned()) };
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, offset).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(bytes)
    }

    fn remove(&self, name: &str) {
        self.forget(name);
        if let Ok(path) = self.path(name) {
            if let Err(e) = fs::remove_file(&path) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete a spill file");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files are written, read back by position and deleted; what an earlier run left is gone
    /// at open; names that would leave the directory are refused.
    #[test]
    fn writes_reads_and_starts_empty() {
        let dir = std::env::temp_dir().join(format!("hg-spill-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("q1-0.run"), b"left over").unwrap();
        let spill = SpillDir::open(&dir).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        spill.write("q1-1.run", b"0123456789").unwrap();
        assert_eq!(spill.read_at("q1-1.run", 3, 4).unwrap(), b"3456");
        assert!(spill.read_at("q1-1.run", 8, 4).is_err(), "a short read is an error");
        assert!(spill.write("../escape", b"x").is_err());
        spill.write("q1-1.run", b"abcdefghij").unwrap();
        assert_eq!(spill.read_at("q1-1.run", 3, 4).unwrap(), b"defg", "rewritten, read afresh");
        spill.remove("q1-1.run");
        spill.remove("q1-1.run");
        assert!(spill.read_at("q1-1.run", 0, 1).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 37: a spill directory deleted under the broker is made again at the next write; a
    /// plain file in its place makes writes fail while running and is replaced at the next open.
    #[test]
    fn a_deleted_or_replaced_directory_is_made_again() {
        let dir = std::env::temp_dir().join(format!("hg-spill-gone-{}", std::process::id()));
        let spill = SpillDir::open(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        spill.write("q1-0.run", b"abc").unwrap();
        assert_eq!(spill.read_at("q1-0.run", 1, 2).unwrap(), b"bc");
        fs::remove_dir_all(&dir).unwrap();
        fs::write(&dir, b"not a directory").unwrap();
        assert!(spill.write("q1-1.run", b"abc").is_err());
        assert!(spill.read_at("q1-1.run", 0, 1).is_err());
        SpillDir::open(&dir).unwrap();
        assert!(dir.is_dir());
        fs::remove_dir_all(&dir).unwrap();
    }
}
