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
    /// Shared: a read takes its own handle, and opens and reads without the lock, so a read
    /// waiting on the disk holds up no other and no write or delete (loads read on tokio's
    /// blocking threads, the HTTP API's listings on its own).
    last_read: Mutex<LastRead>,
    /// What the writer thread shares with the callers.
    shared: Arc<Shared>,
    writes: SyncSender<Write>,
    /// Deletes what earlier runs left (`set_aside`) in the background; joined only by tests.
    #[cfg(test)]
    cleanup: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The file kept open for reads, and how many times a file was forgotten (deleted or written
/// again) so far: a reader that opened a file outside the lock keeps its handle only if no file
/// was forgotten meanwhile, so a handle to a file deleted since is never kept for the next
/// reader of that name.
#[derive(Debug, Default)]
struct LastRead {
    open: Option<(String, Arc<File>)>,
    forgotten: u64,
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

/// Renames `dir` (a directory or a file), if there, to `<dir>.old-<nanos>-<pid>` beside it;
/// returns every such name there, this one and those earlier runs did not get to delete.
fn set_aside(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str())) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a spill directory needs a parent and a name",
        ));
    };
    let prefix = format!("{name}.old-");
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    match fs::rename(dir, parent.join(format!("{prefix}{nanos}-{}", std::process::id()))) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut leftovers = Vec::new();
    for entry in fs::read_dir(parent)? {
        let entry = entry?;
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            leftovers.push(entry.path());
        }
    }
    Ok(leftovers)
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
    /// Opens `dir` empty, and starts its writer thread. Whatever an earlier run left in it (also
    /// a file in its place) is renamed aside and deleted by a thread of its own: at 100M delayed
    /// messages that is gigabytes of runs, whose deletion took a second of a restart (issue 38).
    /// If the writer thread dies, the process exits (supervision); a failed deletion is logged,
    /// and tried again at the next open.
    pub fn open(dir: &Path) -> io::Result<SpillDir> {
        let leftovers = set_aside(dir)?;
        fs::create_dir_all(dir)?;
        #[cfg_attr(not(test), allow(unused_variables))]
        let cleanup = std::thread::Builder::new().name("hg-spill-cleanup".into()).spawn(move || {
            for path in leftovers {
                let removed =
                    if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
                if let Err(e) = removed {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete an earlier run's spill files");
                }
            }
        })?;
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
        Ok(SpillDir {
            dir: dir.to_owned(),
            last_read: Mutex::new(LastRead::default()),
            shared,
            writes,
            #[cfg(test)]
            cleanup: Mutex::new(Some(cleanup)),
        })
    }

    /// Waits until what earlier runs left is deleted (tests).
    #[cfg(test)]
    fn finish_cleanup(&self) {
        if let Some(cleanup) = self.cleanup.lock().unwrap_or_else(PoisonError::into_inner).take() {
            cleanup.join().expect("the cleanup thread does not panic");
        }
    }

    /// Waits until every file handed over so far has been written (or failed).
    #[cfg(test)]
    fn flush(&self) {
        let (done, wait) = mpsc::sync_channel(1);
        self.writes.send(Write::Flush(done)).unwrap();
        wait.recv().unwrap();
    }

    fn last_read(&self) -> MutexGuard<'_, LastRead> {
        // An open file handle has no invariant a panic could break half way.
        self.last_read.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes file `name` if it is the one kept open.
    fn forget(&self, name: &str) {
        let mut last = self.last_read();
        last.forgotten += 1;
        if last.open.as_ref().is_some_and(|(open, _)| open == name) {
            last.open = None;
        }
    }

    fn path(&self, name: &str) -> Result<PathBuf, String> {
        // Names come from the broker (`q<id>-<run>-<write>.run`); anything that could leave the
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
        // The lock is held only to look the handle up and to keep a new one, never across an
        // open or a read that may wait on the disk.
        let (kept, forgotten) = {
            let last = self.last_read();
            let kept = last.open.as_ref().filter(|(open, _)| open == name).map(|(_, file)| file.clone());
            (kept, last.forgotten)
        };
        let file = match kept {
            Some(file) => file,
            None => {
                let file = Arc::new(File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?);
                let mut last = self.last_read();
                if last.forgotten == forgotten {
                    last.open = Some((name.to_owned(), file.clone()));
                }
                file
            }
        };
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
        let spill = SpillDir::open(&dir).unwrap();
        assert!(dir.is_dir());
        spill.finish_cleanup();
        fs::remove_dir_all(&dir).unwrap();
    }

    /// An earlier run's files are out of the way at once and deleted behind the open, and so is
    /// what a run that stopped while deleting left (issue 38: deleting a 100M backlog's runs
    /// took a second of the restart).
    #[test]
    fn an_earlier_runs_files_are_set_aside_and_deleted_behind_the_open() {
        let parent = std::env::temp_dir().join(format!("hg-spill-aside-{}", std::process::id()));
        let dir = parent.join("delays");
        fs::create_dir_all(&dir).unwrap();
        for run in 0..50 {
            fs::write(dir.join(format!("q1-{run}.run")), vec![1; 4096]).unwrap();
        }
        let interrupted = parent.join("delays.old-1-1");
        fs::create_dir_all(&interrupted).unwrap();
        fs::write(interrupted.join("q2-0.run"), b"x").unwrap();
        fs::write(parent.join("messages-not-ours"), b"kept").unwrap();
        let spill = SpillDir::open(&dir).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the directory opens empty");
        spill.finish_cleanup();
        let mut left: Vec<String> =
            fs::read_dir(&parent).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["delays", "messages-not-ours"]);
        fs::remove_dir_all(&parent).unwrap();
    }
}
