//! The storage seam: a flat directory of named files, each readable and writable at an offset.
//!
//! Everything the store persists goes through [`Storage`] and [`StorageFile`], modelled on redb's
//! `StorageBackend` (a handful of methods, nothing more). Two backends exist:
//! [`FsStorage`] (real files, `fsync`) and [`MemStorage`] (memory, with a *durable image* that holds
//! only what was synced, so tests can crash at any point and recover from exactly what a disk would
//! have kept).
//!
//! Durability contract every backend keeps:
//! - file contents are durable only up to the last [`StorageFile::sync`];
//! - [`Storage::create`], [`Storage::remove`] and [`Storage::rename`] are durable when they return
//!   (the file-system backend syncs the directory), and `rename` replaces its target atomically.

mod fs;
mod mem;

use std::fmt;
use std::io;

pub use fs::FsStorage;
pub use mem::{Crash, Fault, MemImage, MemStorage};

/// A flat directory of files. Names are plain file names (no separators).
pub trait Storage: Send + Sync + fmt::Debug {
    /// The names of every file in the directory, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Creates a new, empty file; fails if it exists. The new name is durable on return.
    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, name: &str) -> io::Result<Box<dyn StorageFile>>;
    /// Removes a file; durable on return.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Renames `from` to `to`, atomically replacing `to`; durable on return.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
}

/// One open file. All methods take `&self` so a handle can be shared by readers (positional I/O).
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// The file's current length in bytes (synced or not).
    fn len_bytes(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; `UnexpectedEof` if the file ends first.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes all of `data` at `offset`, extending the file if needed. Not durable until `sync`.
    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Truncates or extends the file. Not durable until `sync`.
    fn set_len(&self, len_bytes: u64) -> io::Result<()>;
    /// Makes every earlier write and `set_len` durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
}
