//! A file that appears at its path only when complete.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// A file that appears at its path only when [`AtomicFile::commit`] succeeds; until
/// then it is a hidden temporary beside the target, removed if the run fails. A target
/// that exists and is no regular file (`/dev/null`, a named pipe) is written in place:
/// renaming over it would replace the device or pipe with a file.
pub(crate) struct AtomicFile {
    output: Output,
    target: PathBuf,
    /// Whether room may have been reserved past what gets written.
    reserved: bool,
}

enum Output {
    Temporary(tempfile::NamedTempFile),
    InPlace(File),
}

impl AtomicFile {
    /// The temporary beside `target`: it fails at once where `target` can not be
    /// written. A new file gets the mode the umask allows; a replaced one keeps its own.
    pub(crate) fn create(target: &Path) -> io::Result<AtomicFile> {
        let existing = std::fs::metadata(target).ok();
        if existing.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory"));
        }
        if existing.as_ref().is_some_and(|m| !m.is_file()) {
            let special = std::fs::OpenOptions::new().write(true).open(target)?;
            return Ok(AtomicFile {
                output: Output::InPlace(special),
                target: target.to_path_buf(),
                reserved: false,
            });
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".partial");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // as open(2) creates it: 0666 less the umask
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let temp = builder.tempfile_in(&dir)?;
        if let Some(meta) = existing {
            temp.as_file().set_permissions(meta.permissions())?;
        }
        Ok(AtomicFile { output: Output::Temporary(temp), target: target.to_path_buf(), reserved: false })
    }

    /// Reserve blocks for about `bytes` of output where the file system can: buffered
    /// writes into them skip ext4's page by page bookkeeping of delayed allocation
    /// (10-15 ms of a 200 MB rewrite). What is not written is given back on commit.
    pub(crate) fn reserve(&mut self, bytes: u64) {
        if let Output::Temporary(temp) = &self.output {
            // a failed reservation may still leave some blocks reserved: cut on commit anyway
            self.reserved = true;
            crate::sys::reserve_blocks(temp.as_file(), bytes);
        }
    }

    /// The file to write.
    pub(crate) fn file(&self) -> &File {
        match &self.output {
            Output::Temporary(temp) => temp.as_file(),
            Output::InPlace(file) => file,
        }
    }

    /// Whether the output is a regular file (written beside it, then renamed).
    pub(crate) fn is_regular(&self) -> bool {
        matches!(self.output, Output::Temporary(_))
    }

    /// Put the file at its path (replacing what was there), or leave it written in place.
    pub(crate) fn commit(self) -> io::Result<()> {
        if let Output::Temporary(temp) = self.output {
            if self.reserved {
                // cut at its own length, a file gives back the blocks past its end
                let file = temp.as_file();
                file.set_len(file.metadata()?.len())?;
            }
            // Renamed over an existing file, ext4 writes the new one out first (its
            // `auto_da_alloc`): a tenth of a second per 200 MB. Exchanged with it, the
            // old one is left under the temporary's name, which dropping it removes.
            if crate::sys::exchange(temp.path(), &self.target).is_ok() {
                return Ok(());
            }
            temp.persist(&self.target).map_err(|e| e.error)?;
        }
        Ok(())
    }
}

#[cfg(all(test, unix))]
mod atomic_file_tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_device_is_written_in_place_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let null = Path::new("/dev/null");
        let out = AtomicFile::create(null).unwrap();
        assert!(!out.is_regular());
        out.file().write_all(b"{}").unwrap();
        out.commit().unwrap();
        assert!(
            std::fs::metadata(null).unwrap().file_type().is_char_device(),
            "/dev/null is still the device"
        );
    }

    #[test]
    fn reserved_room_that_is_not_written_is_given_back() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.json");
        let mut out = AtomicFile::create(&target).unwrap();
        out.reserve(8 << 20);
        let reserved = out.file().metadata().unwrap().blocks() * 512;
        out.file().write_all(&[b' '; 100_000]).unwrap();
        out.commit().unwrap();
        let meta = std::fs::metadata(&target).unwrap();
        assert_eq!(meta.len(), 100_000);
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "{} bytes allocated (reserved: {reserved})",
            meta.blocks() * 512
        );
        assert!(reserved == 0 || reserved >= 8 << 20, "room was reserved where the file system could");

        // more room than any disk has: the reservation fails and the output is whole
        let mut out = AtomicFile::create(&target).unwrap();
        out.reserve(1 << 50);
        out.file().write_all(b"[]").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"[]");
    }

    #[test]
    fn a_regular_file_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.json");
        let out = AtomicFile::create(&target).unwrap();
        assert!(out.is_regular());
        out.file().write_all(b"{}").unwrap();
        assert!(!target.exists());
        out.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"{}");
    }

    #[test]
    fn a_replaced_file_leaves_nothing_beside_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.json");
        std::fs::write(&target, b"old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        let out = AtomicFile::create(&target).unwrap();
        out.file().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        out.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o640);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("out.json")]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[cfg(unix)]
    #[test]
    fn atomic_files_take_the_umask_or_the_replaced_files_mode() {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // the umask is the process's: read it back from a file open(2) creates
        let probe = dir.path().join("probe");
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o666).open(&probe).unwrap();
        let fresh = dir.path().join("new.json");
        AtomicFile::create(&fresh).unwrap().commit().unwrap();
        assert_eq!(mode(&fresh), mode(&probe));
        let kept = dir.path().join("kept.json");
        std::fs::write(&kept, b"old").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
        AtomicFile::create(&kept).unwrap().commit().unwrap();
        assert_eq!(mode(&kept), 0o640);
    }

    #[test]
    fn atomic_files_fail_at_once_where_the_target_can_not_be() {
        let dir = tempfile::tempdir().unwrap();
        assert!(AtomicFile::create(&dir.path().join("missing").join("out.json")).is_err());
        assert_eq!(AtomicFile::create(dir.path()).err().map(|e| e.kind()), Some(io::ErrorKind::IsADirectory));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn atomic_files_appear_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.json");
        std::fs::write(&target, b"old").unwrap();
        {
            let f = AtomicFile::create(&target).unwrap();
            let mut file = f.file();
            file.write_all(b"partial").unwrap();
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "the temporary is gone");
        let f = AtomicFile::create(&target).unwrap();
        let mut file = f.file();
        file.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
    }
}
