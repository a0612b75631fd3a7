//! The in-memory backend, built for crash tests.
//!
//! Each file keeps two byte vectors: `data` (what reads see) and `synced` (its *durable image*, what
//! a disk would still hold after a power cut). [`StorageFile::sync`] copies `data` into `synced`;
//! create, remove and rename are durable at once, as the file-system backend makes them.
//!
//! A test "crashes" with [`MemStorage::crash`] (or [`MemImage::crash`]): the returned storage holds
//! only the durable image, optionally with a torn tail — a prefix of the unsynced bytes, possibly
//! garbled — as a disk may keep after losing power mid-write. With [`MemStorage::record_sync_points`]
//! the backend captures a [`MemImage`] just before every durability event (sync, create, remove,
//! rename), so a test can crash at every sync point of a workload.
//!
//! Torn tails model append-only files: unsynced overwrites inside the synced range are not modelled
//! (the store never overwrites synced bytes).

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Storage, StorageFile};

/// How a simulated crash treats bytes written but not synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    /// Only synced bytes survive.
    LoseUnsynced,
    /// Every written byte survives (the crash came just after the pending sync finished).
    KeepUnsynced,
    /// The first `bytes` unsynced bytes of each file survive; with `garbled`, the last of them is
    /// flipped, as a sector half-written when the power went.
    Torn { bytes: usize, garbled: bool },
}

/// A fault the next operations of a [`MemStorage`] report, to test error paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// Everything works.
    #[default]
    None,
    /// Writes, set_len and create fail with `StorageFull` (a full disk).
    DiskFull,
    /// Syncs fail with an I/O error (a failing device).
    SyncFails,
}

/// Shared in-memory storage; clones see the same files.
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    shared: Arc<Mutex<Dir>>,
}

/// The state of every file at one instant: durable and written bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemImage {
    files: BTreeMap<String, FileBytes>,
}

#[derive(Debug, Default)]
struct Dir {
    files: BTreeMap<String, Arc<Mutex<FileBytes>>>,
    recording: bool,
    images: Vec<MemImage>,
    fault: Fault,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct FileBytes {
    data: Vec<u8>,
    synced: Vec<u8>,
    /// Lowest offset written or cut since the last sync (`None`: clean), so a sync copies only
    /// what changed and stays cheap on large files.
    dirty_from: Option<usize>,
}

#[derive(Debug)]
struct MemFile {
    bytes: Arc<Mutex<FileBytes>>,
    dir: Arc<Mutex<Dir>>,
}

impl MemStorage {
    /// An empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on, capture an image before every durability event (see the module doc).
    pub fn record_sync_points(&self) {
        lock(&self.shared).recording = true;
    }

    /// The images captured so far, oldest first; clears the list.
    pub fn take_images(&self) -> Vec<MemImage> {
        std::mem::take(&mut lock(&self.shared).images)
    }

    /// Makes later operations fail as `fault` says.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared).fault = fault;
    }

    /// The state of every file now.
    pub fn image(&self) -> MemImage {
        lock(&self.shared).image()
    }

    /// A new storage holding what a disk would hold if the machine lost power now.
    pub fn crash(&self, crash: Crash) -> MemStorage {
        self.image().crash(crash)
    }
}

impl MemImage {
    /// A new storage holding what survives this image's crash.
    pub fn crash(&self, crash: Crash) -> MemStorage {
        let mut files = BTreeMap::new();
        for (name, file) in &self.files {
            let surviving = file.surviving(crash);
            let bytes = FileBytes { data: surviving.clone(), synced: surviving, dirty_from: None };
            files.insert(name.clone(), Arc::new(Mutex::new(bytes)));
        }
        MemStorage { shared: Arc::new(Mutex::new(Dir { files, ..Dir::default() })) }
    }

    /// The most unsynced bytes any one file holds (the range worth tearing).
    pub fn unsynced_bytes_max(&self) -> usize {
        self.files.values().map(|f| f.data.len().saturating_sub(f.synced.len())).max().unwrap_or(0)
    }

    /// The file names in this image.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }
}

impl FileBytes {
    fn surviving(&self, crash: Crash) -> Vec<u8> {
        let synced_len = self.synced.len();
        let unsynced = self.data.get(synced_len..).unwrap_or(&[]);
        let kept = match crash {
            Crash::LoseUnsynced => 0,
            Crash::KeepUnsynced => unsynced.len(),
            Crash::Torn { bytes, .. } => bytes.min(unsynced.len()),
        };
        let mut out = self.synced.clone();
        out.extend_from_slice(&unsynced[..kept]);
        if let Crash::Torn { garbled: true, .. } = crash {
            if kept > 0 {
                if let Some(last) = out.last_mut() {
                    *last ^= 0xA5;
                }
            }
        }
        out
    }
}

impl FileBytes {
    fn mark_dirty(&mut self, from: usize) {
        self.dirty_from = Some(self.dirty_from.map_or(from, |d| d.min(from)));
    }
}

impl Dir {
    fn image(&self) -> MemImage {
        let files = self.files.iter().map(|(name, file)| (name.clone(), lock(file).clone())).collect();
        MemImage { files }
    }

    fn before_durable_event(&mut self) {
        if self.recording {
            let image = self.image();
            self.images.push(image);
        }
    }

    fn check(&self, is_sync: bool) -> io::Result<()> {
        match (self.fault, is_sync) {
            (Fault::DiskFull, false) => {
                Err(io::Error::new(io::ErrorKind::StorageFull, "injected: no space left on device"))
            }
            (Fault::SyncFails, true) => Err(io::Error::other("injected: sync failed")),
            _ => Ok(()),
        }
    }
}

impl Storage for MemStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(lock(&self.shared).files.keys().cloned().collect())
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let mut dir = lock(&self.shared);
        dir.check(false)?;
        if dir.files.contains_key(name) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        dir.before_durable_event();
        let bytes = Arc::new(Mutex::new(FileBytes::default()));
        dir.files.insert(name.to_owned(), Arc::clone(&bytes));
        Ok(Box::new(MemFile { bytes, dir: Arc::clone(&self.shared) }))
    }

    fn open(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let dir = lock(&self.shared);
        let bytes = dir.files.get(name).ok_or(io::ErrorKind::NotFound)?;
        Ok(Box::new(MemFile { bytes: Arc::clone(bytes), dir: Arc::clone(&self.shared) }))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut dir = lock(&self.shared);
        if !dir.files.contains_key(name) {
            return Err(io::ErrorKind::NotFound.into());
        }
        dir.before_durable_event();
        dir.files.remove(name);
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut dir = lock(&self.shared);
        if !dir.files.contains_key(from) {
            return Err(io::ErrorKind::NotFound.into());
        }
        dir.before_durable_event();
        if let Some(file) = dir.files.remove(from) {
            dir.files.insert(to.to_owned(), file);
        }
        Ok(())
    }
}

impl StorageFile for MemFile {
    fn len_bytes(&self) -> io::Result<u64> {
        Ok(lock(&self.bytes).data.len() as u64)
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let file = lock(&self.bytes);
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
        let src = file.data.get(start..end).ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        lock(&self.dir).check(false)?;
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let end = start + data.len();
        let mut file = lock(&self.bytes);
        if file.data.len() < end {
            file.data.resize(end, 0);
        }
        file.data[start..end].copy_from_slice(data);
        file.mark_dirty(start);
        Ok(())
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        lock(&self.dir).check(false)?;
        let len = usize::try_from(len_bytes).map_err(|_| io::ErrorKind::InvalidInput)?;
        let mut file = lock(&self.bytes);
        let cut_from = len.min(file.data.len());
        file.data.resize(len, 0);
        file.mark_dirty(cut_from);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut dir = lock(&self.dir);
        dir.check(true)?;
        dir.before_durable_event();
        let mut file = lock(&self.bytes);
        if let Some(from) = file.dirty_from.take() {
            let FileBytes { data, synced, .. } = &mut *file;
            synced.truncate(from);
            let kept = synced.len();
            synced.extend_from_slice(&data[kept..]);
        }
        Ok(())
    }
}

/// Locks a mutex, ignoring poisoning: a test thread that panicked leaves plain bytes behind, which
/// are as valid as before the panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(storage: &MemStorage, name: &str) -> Vec<u8> {
        let file = storage.open(name).unwrap();
        let mut buf = vec![0; file.len_bytes().unwrap() as usize];
        file.read_exact_at(0, &mut buf).unwrap();
        buf
    }

    /// A crash keeps synced bytes and drops the rest; a torn crash keeps a prefix of the rest.
    #[test]
    fn crash_keeps_only_synced_bytes_or_a_torn_prefix() {
        let storage = MemStorage::new();
        let file = storage.create("f").unwrap();
        file.write_all_at(0, b"durable").unwrap();
        file.sync().unwrap();
        file.write_all_at(7, b"-volatile").unwrap();
        assert_eq!(read_all(&storage.crash(Crash::LoseUnsynced), "f"), b"durable");
        assert_eq!(read_all(&storage.crash(Crash::KeepUnsynced), "f"), b"durable-volatile");
        let torn = Crash::Torn { bytes: 3, garbled: false };
        assert_eq!(read_all(&storage.crash(torn), "f"), b"durable-vo");
        let garbled = Crash::Torn { bytes: 3, garbled: true };
        let bytes = read_all(&storage.crash(garbled), "f");
        assert_eq!(&bytes[..9], b"durable-v");
        assert_ne!(bytes[9], b'o');
        assert_eq!(storage.image().unsynced_bytes_max(), 9);
    }

    /// A sync after a truncation or an overwrite makes exactly the new bytes durable.
    #[test]
    fn sync_after_truncate_and_overwrite_is_exact() {
        let storage = MemStorage::new();
        let file = storage.create("f").unwrap();
        file.write_all_at(0, b"0123456789").unwrap();
        file.sync().unwrap();
        file.set_len(4).unwrap();
        file.write_all_at(2, b"ab").unwrap();
        assert_eq!(read_all(&storage.crash(Crash::LoseUnsynced), "f"), b"0123456789");
        file.sync().unwrap();
        assert_eq!(read_all(&storage.crash(Crash::LoseUnsynced), "f"), b"01ab");
    }

    /// Recording captures the state before each sync, create, remove and rename.
    #[test]
    fn recording_captures_an_image_before_each_durable_event() {
        let storage = MemStorage::new();
        storage.record_sync_points();
        let file = storage.create("a").unwrap(); // 1
        file.write_all_at(0, b"x").unwrap();
        file.sync().unwrap(); // 2
        storage.rename("a", "b").unwrap(); // 3
        storage.remove("b").unwrap(); // 4
        let images = storage.take_images();
        assert_eq!(images.len(), 4);
        assert_eq!(images[0].names().count(), 0);
        assert_eq!(read_all(&images[1].crash(Crash::KeepUnsynced), "a"), b"x");
        assert!(read_all(&images[1].crash(Crash::LoseUnsynced), "a").is_empty());
        assert_eq!(images[3].names().collect::<Vec<_>>(), ["b"]);
    }

    /// Injected faults surface as I/O errors of the right kind.
    #[test]
    fn injected_faults_fail_writes_or_syncs() {
        let storage = MemStorage::new();
        let file = storage.create("f").unwrap();
        storage.inject(Fault::DiskFull);
        let err = file.write_all_at(0, b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        storage.inject(Fault::SyncFails);
        file.write_all_at(0, b"x").unwrap();
        assert!(file.sync().is_err());
        storage.inject(Fault::None);
        file.sync().unwrap();
    }
}
