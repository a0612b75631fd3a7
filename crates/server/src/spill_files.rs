//! The broker's spill files (ADR 0013, phase 1): far-future delayed messages as sorted runs of
//! records in `<data dir>/delays/`. They are not durable state (the message log is), so the
//! directory is emptied when the broker opens it and nothing here is ever synced. The directory
//! is the broker's own: one deleted under it is made again at the next write, and a plain file
//! found in its place at start is removed (issue 37; the broker serves a run it cannot write or
//! read back from memory meanwhile).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hourglass_broker::queue::SpillFiles;

use crate::supervise::{panic_message, Died, Part};

/// Files handed to the writer thread at most at once (a run is ~1.3 MB): a far tier spilling
/// faster than the disk takes them waits here instead of holding more in memory.
const WRITES_QUEUED: usize = 4;

/// A directory of spill files, emptied at open. Writes go to a writer thread of their own (the
/// caller is the broker's thread, which must not wait on the page cache: rebuilding the far tier
/// at a restart spent 40 % of its time in that copy, issue 38); a file is served from memory until
/// it is on disk.
#[derive(Debug)]
pub struct SpillDir {
    dir: PathBuf,
    /// The file read last, kept open: a load, a listing's binary search and a scan read one run
    /// many times in a row, and an open per read would double the system calls.
    last_read: Mutex<Option<(String, File)>>,
    /// What the writer thread shares with the callers.
    shared: Arc<Shared>,
    writes: SyncSender<Write>,
}

/// What the writer thread and the callers share.
#[derive(Debug, Default)]
struct Shared {
    /// Files handed to the writer and not yet on disk (or that it could not write): reads are
    /// served from here.
    pending: Mutex<HashMap<String, Arc<Vec<u8>>>>,
    /// The writer could not write a file: later writes are made on the caller's thread, so that
    /// each fails there and the far tier keeps its run in memory the compact way, until one
    /// succeeds.
    failing: AtomicBool,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, HashMap<String, Arc<Vec<u8>>>> {
        // A map of names to bytes has no invariant a panic could break half way.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A job for the writer thread.
enum Write {
    File {
        name: String,
        path: PathBuf,
        bytes: Arc<Vec<u8>>,
    },
    /// Answers once every file handed over before it is written (tests).
    #[cfg(test)]
    Flush(SyncSender<()>),
}

impl SpillDir {
    /// Opens `dir`, deleting whatever an earlier run left in it (also a file in its place), and
    /// starts its writer thread. If the writer thread dies, the process exits (supervision).
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
        let shared = Arc::new(Shared::default());
        let (writes, queued) = mpsc::sync_channel(WRITES_QUEUED);
        let for_writer = Arc::clone(&shared);
        let dir_for_writer = dir.to_owned();
        std::thread::Builder::new().name("hg-spill-writer".into()).spawn(move || {
            let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                write_files(&dir_for_writer, &for_writer, &queued)
            }));
            if let Err(payload) = written {
                Died::new(Part::SpillWriter, panic_message(payload.as_ref()));
                std::process::exit(1);
            }
        })?;
        Ok(SpillDir { dir: dir.to_owned(), last_read: Mutex::new(None), shared, writes })
    }

    /// Waits until every file handed over so far has been written (or failed).
    #[cfg(test)]
    fn flush(&self) {
        let (done, wait) = mpsc::sync_channel(1);
        self.writes.send(Write::Flush(done)).unwrap();
        wait.recv().unwrap();
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

/// Writes `path`, making the directory again if it was deleted under the broker (a plain file in
/// its place is not removed while running: the write fails).
fn write_file(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    match fs::write(path, bytes) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).and_then(|()| fs::write(path, bytes))
        }
        written => written,
    }
}

/// The writer thread: writes each file handed over, unless it was removed or handed over again
/// meanwhile, then stops serving it from memory. A file it cannot write stays in memory (one,
/// or the few queued behind it: later writes are made by the caller while writes fail).
fn write_files(dir: &Path, shared: &Shared, queued: &Receiver<Write>) {
    while let Ok(job) = queued.recv() {
        let (name, path, bytes) = match job {
            Write::File { name, path, bytes } => (name, path, bytes),
            #[cfg(test)]
            Write::Flush(done) => {
                let _ = done.send(());
                continue;
            }
        };
        let current = |pending: &HashMap<String, Arc<Vec<u8>>>| {
            pending.get(&name).is_some_and(|b| Arc::ptr_eq(b, &bytes))
        };
        if !current(&shared.pending()) {
            continue;
        }
        if let Err(e) = write_file(dir, &path, &bytes) {
            if !shared.failing.swap(true, Ordering::SeqCst) {
                tracing::warn!(path = %path.display(), error = %e, "cannot write a spill file; it is served from memory");
            }
            continue;
        }
        let mut pending = shared.pending();
        if current(&pending) {
            pending.remove(&name);
        } else if !pending.contains_key(&name) {
            // Removed while it was being written: the file must not outlive it.
            let _ = fs::remove_file(&path);
        }
    }
}

impl SpillFiles for SpillDir {
    fn write(&self, name: &str, bytes: Vec<u8>) -> Result<(), String> {
        let path = self.path(name)?;
        // A file written again under a name read before is a new file: never read the old one.
        self.forget(name);
        if self.shared.failing.load(Ordering::SeqCst) {
            self.shared.pending().remove(name);
            write_file(&self.dir, &path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            self.shared.failing.store(false, Ordering::SeqCst);
            return Ok(());
        }
        let bytes = Arc::new(bytes);
        self.shared.pending().insert(name.to_owned(), Arc::clone(&bytes));
        self.writes
            .send(Write::File { name: name.to_owned(), path, bytes })
            .map_err(|_| "spill writer gone".to_owned())
    }

    fn read_at(&self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let path = self.path(name)?;
        if let Some(bytes) = self.shared.pending().get(name) {
            let start =
                usize::try_from(offset).map_err(|_| format!("{}: offset out of range", path.display()))?;
            let end = start.checked_add(len).filter(|end| *end <= bytes.len());
            return end
                .map(|end| bytes[start..end].to_vec())
                .ok_or_else(|| format!("{}: short read", path.display()));
        }
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
        self.shared.pending().remove(name);
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

    /// Files are written, read back by position (before and after the writer thread has them
    /// on disk) and deleted; what an earlier run left is gone at open; names that would leave the
    /// directory are refused.
    #[test]
    fn writes_reads_and_starts_empty() {
        let dir = std::env::temp_dir().join(format!("hg-spill-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("q1-0.run"), b"left over").unwrap();
        let spill = SpillDir::open(&dir).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        spill.write("q1-1.run", b"0123456789".to_vec()).unwrap();
        assert_eq!(spill.read_at("q1-1.run", 3, 4).unwrap(), b"3456");
        assert!(spill.read_at("q1-1.run", 8, 4).is_err(), "a short read is an error");
        spill.flush();
        assert_eq!(fs::read(dir.join("q1-1.run")).unwrap(), b"0123456789");
        assert!(spill.shared.pending().is_empty(), "a written file is no longer held in memory");
        assert_eq!(spill.read_at("q1-1.run", 3, 4).unwrap(), b"3456");
        assert!(spill.read_at("q1-1.run", 8, 4).is_err(), "a short read is an error");
        assert!(spill.write("../escape", b"x".to_vec()).is_err());
        spill.write("q1-1.run", b"abcdefghij".to_vec()).unwrap();
        assert_eq!(spill.read_at("q1-1.run", 3, 4).unwrap(), b"defg", "rewritten, read afresh");
        spill.flush();
        assert_eq!(spill.read_at("q1-1.run", 3, 4).unwrap(), b"defg", "rewritten, read afresh");
        spill.remove("q1-1.run");
        spill.remove("q1-1.run");
        assert!(spill.read_at("q1-1.run", 0, 1).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A file removed before the writer thread came to it is never written, and one written and
    /// removed is gone: nothing outlives its run.
    #[test]
    fn a_file_removed_while_queued_is_not_left_behind() {
        let dir = std::env::temp_dir().join(format!("hg-spill-removed-{}", std::process::id()));
        let spill = SpillDir::open(&dir).unwrap();
        for run in 0..20 {
            spill.write(&format!("q1-{run}.run"), vec![7; 1 << 16]).unwrap();
            if run % 2 == 0 {
                spill.remove(&format!("q1-{run}.run"));
            }
        }
        spill.flush();
        let mut left: Vec<String> =
            fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        let mut kept: Vec<String> = (1..20).step_by(2).map(|run| format!("q1-{run}.run")).collect();
        kept.sort();
        assert_eq!(left, kept);
        assert!(spill.read_at("q1-2.run", 0, 1).is_err());
        assert_eq!(spill.read_at("q1-3.run", 0, 2).unwrap(), [7, 7]);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 37: a spill directory deleted under the broker is made again at the next write; a
    /// plain file in its place makes writes fail while running (the file the writer thread
    /// could not write is served from memory, and the next write fails to its caller, which
    /// keeps its run in memory) and is replaced at the next open.
    #[test]
    fn a_deleted_or_replaced_directory_is_made_again() {
        let dir = std::env::temp_dir().join(format!("hg-spill-gone-{}", std::process::id()));
        let spill = SpillDir::open(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        spill.write("q1-0.run", b"abc".to_vec()).unwrap();
        spill.flush();
        assert_eq!(fs::read(dir.join("q1-0.run")).unwrap(), b"abc");
        assert_eq!(spill.read_at("q1-0.run", 1, 2).unwrap(), b"bc");
        fs::remove_dir_all(&dir).unwrap();
        fs::write(&dir, b"not a directory").unwrap();
        spill.write("q1-1.run", b"abc".to_vec()).unwrap();
        spill.flush();
        assert_eq!(spill.read_at("q1-1.run", 0, 1).unwrap(), b"a", "served from memory");
        assert!(spill.write("q1-2.run", b"abc".to_vec()).is_err());
        assert!(spill.read_at("q1-2.run", 0, 1).is_err());
        fs::remove_file(&dir).unwrap();
        spill.write("q1-3.run", b"abc".to_vec()).unwrap();
        assert_eq!(
            fs::read(dir.join("q1-3.run")).unwrap(),
            b"abc",
            "written by the caller while writes failed"
        );
        spill.write("q1-4.run", b"abc".to_vec()).unwrap();
        spill.flush();
        assert_eq!(fs::read(dir.join("q1-4.run")).unwrap(), b"abc", "and by the writer thread again");
        fs::remove_dir_all(&dir).unwrap();
        fs::write(&dir, b"not a directory").unwrap();
        SpillDir::open(&dir).unwrap();
        assert!(dir.is_dir());
        fs::remove_dir_all(&dir).unwrap();
    }
}
