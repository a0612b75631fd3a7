//! The real-file backend: `std::fs` with positional I/O, `fdatasync` on [`StorageFile::sync`] and a
//! directory `fsync` after every create, remove and rename, so a new or vanished name survives a
//! power cut (ext4 and XFS do not promise that without it).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use super::{Storage, StorageFile};

/// A directory on a real file system.
#[derive(Debug)]
pub struct FsStorage {
    dir: PathBuf,
}

impl FsStorage {
    /// Opens `dir`, creating it (and its parents) if missing.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        if !dir.is_dir() {
            fs::create_dir_all(&dir)?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        Ok(Self { dir })
    }

    /// The directory this storage lives in.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn file_path(&self, name: &str) -> io::Result<PathBuf> {
        // A name with a separator would escape the directory this storage owns.
        if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a plain file name: {name:?}"),
            ));
        }
        Ok(self.dir.join(name))
    }
}

impl Storage for FsStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            // A name that is not UTF-8 is not one of ours.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(self.file_path(name)?)?;
        sync_dir(&self.dir)?;
        Ok(Box::new(FsFile { file }))
    }

    fn open(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new().read(true).write(true).open(self.file_path(name)?)?;
        Ok(Box::new(FsFile { file }))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.file_path(name)?)?;
        sync_dir(&self.dir)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.file_path(from)?, self.file_path(to)?)?;
        sync_dir(&self.dir)
    }
}

#[derive(Debug)]
struct FsFile {
    file: File,
}

impl StorageFile for FsFile {
    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        positional::read_exact_at(&self.file, offset, buf)
    }

    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        positional::write_all_at(&self.file, offset, data)
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.file.set_len(len_bytes)
    }

    fn sync(&self) -> io::Result<()> {
        // fdatasync also flushes the size change of an append (the metadata needed to read it).
        self.file.sync_data()
    }
}

/// Makes the directory's entries (creations, removals, renames) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        // Windows cannot open a directory as a file; NTFS journals its metadata itself.
        let _ = dir;
        Ok(())
    }
}

#[cfg(unix)]
mod positional {
    use std::fs::File;
    use std::io;
    use std::os::unix::fs::FileExt;

    pub(super) fn read_exact_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        file.read_exact_at(buf, offset)
    }

    pub(super) fn write_all_at(file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        file.write_all_at(data, offset)
    }
}

#[cfg(windows)]
mod positional {
    use std::fs::File;
    use std::io;
    use std::os::windows::fs::FileExt;

    pub(super) fn read_exact_at(file: &File, mut offset: u64, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match file.seek_read(buf, offset)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    pub(super) fn write_all_at(file: &File, mut offset: u64, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match file.seek_write(data, offset)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => {
                    data = &data[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file written and synced reads back the same bytes after the handle is reopened.
    #[test]
    fn written_bytes_read_back_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let storage = FsStorage::open(dir.path().join("data")).unwrap();
        let file = storage.create("a").unwrap();
        file.write_all_at(0, b"hello").unwrap();
        file.write_all_at(5, b" world").unwrap();
        file.sync().unwrap();
        drop(file);
        let file = storage.open("a").unwrap();
        assert_eq!(file.len_bytes().unwrap(), 11);
        let mut buf = [0; 5];
        file.read_exact_at(6, &mut buf).unwrap();
        assert_eq!(&buf, b"world");
        let err = file.read_exact_at(8, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// Create refuses an existing name; rename replaces; remove and list see the directory.
    #[test]
    fn create_rename_remove_and_list() {
        let dir = tempfile::tempdir().unwrap();
        let storage = FsStorage::open(dir.path()).unwrap();
        storage.create("x.tmp").unwrap().write_all_at(0, b"new").unwrap();
        storage.create("x").unwrap();
        assert!(storage.create("x").is_err());
        storage.rename("x.tmp", "x").unwrap();
        let mut names = storage.list().unwrap();
        names.sort();
        assert_eq!(names, ["x"]);
        assert_eq!(storage.open("x").unwrap().len_bytes().unwrap(), 3);
        storage.remove("x").unwrap();
        assert!(storage.list().unwrap().is_empty());
    }

    /// Names that would leave the directory are refused.
    #[test]
    fn path_separators_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let storage = FsStorage::open(dir.path()).unwrap();
        assert!(storage.create("../escape").is_err());
        assert!(storage.open("..").is_err());
    }
}
