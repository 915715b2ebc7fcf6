//! Writing outputs atomically, gzipped on all cores when the name ends in `.gz`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use flate2::{Compress, Compression, FlushCompress, Status};

use crate::write::direct_io::{self, DirectFile, WriteMode};

/// A file that appears at its path only when [`AtomicFile::commit`] succeeds; until
/// then it is a hidden temporary beside the target, removed if the run fails. A target
/// that exists and is no regular file (`/dev/null`, a named pipe) is written in place:
/// renaming over it would replace the device or pipe with a file.
pub struct AtomicFile {
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
    pub fn create(target: &Path) -> io::Result<AtomicFile> {
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
    pub fn reserve(&mut self, bytes: u64) {
        #[cfg(target_os = "linux")]
        if let Output::Temporary(temp) = &self.output {
            use std::os::fd::AsRawFd;
            let Ok(len) = libc::off_t::try_from(bytes) else { return };
            // a failed fallocate may still leave some blocks reserved: cut on commit anyway
            self.reserved = true;
            // SAFETY: a descriptor this owns; it only reserves blocks.
            unsafe { libc::fallocate(temp.as_file().as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) };
        }
    }

    pub fn file(&self) -> &File {
        match &self.output {
            Output::Temporary(temp) => temp.as_file(),
            Output::InPlace(file) => file,
        }
    }

    /// Whether the output is a regular file (written beside it, then renamed).
    pub fn is_regular(&self) -> bool {
        matches!(self.output, Output::Temporary(_))
    }

    pub fn commit(self) -> io::Result<()> {
        if let Output::Temporary(temp) = self.output {
            if self.reserved {
                // cut at its own length, a file gives back the blocks past its end
                let file = temp.as_file();
                file.set_len(file.metadata()?.len())?;
            }
            // Renamed over an existing file, ext4 writes the new one out first (its
            // `auto_da_alloc`): a tenth of a second per 200 MB. Exchanged with it, the
            // old one is left under the temporary's name, which dropping it removes.
            if exchange(temp.path(), &self.target).is_ok() {
                return Ok(());
            }
            temp.persist(&self.target).map_err(|e| e.error)?;
        }
        Ok(())
    }
}

/// Swap two paths atomically (`renameat2` with `RENAME_EXCHANGE`); fails where either
/// does not exist or the file system can not.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let (a, b) = (CString::new(a.as_os_str().as_bytes())?, CString::new(b.as_os_str().as_bytes())?);
    // the system call, not glibc's wrapper, which older glibc lacks
    // SAFETY: both are NUL-terminated paths that live across the call.
    let done = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(all(test, unix))]
mod atomic_file_tests {
    use super::*;

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

/// Where a rewritten trace goes: plain, or gzip compressed in parallel blocks.
pub enum Sink {
    Plain(BackgroundWriter),
    Gzip(ParallelGz),
}

impl Sink {
    /// `large` plain outputs may be written around the page cache (see [`crate::write::direct_io`]).
    pub fn new(file: File, gzip: bool, level: u32, large: bool) -> Sink {
        if gzip {
            Sink::Gzip(ParallelGz::new(file, level))
        } else {
            let mode = if large { WriteMode::from_env() } else { WriteMode::Buffered };
            Sink::Plain(BackgroundWriter::new(DirectFile::new(file, mode)))
        }
    }

    pub fn finish(self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.finish(),
            Sink::Gzip(gz) => gz.finish(),
        }
    }
}

/// Work for a thread that writes the output, through a bounded queue: what it fails
/// with is what sending (when it has stopped) and finishing report.
struct WriterThread<T> {
    queue: Option<SyncSender<T>>,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// The errors where the thread stopped without one of its own, or panicked.
    stopped: &'static str,
    panicked: &'static str,
}

impl<T> WriterThread<T> {
    /// `thread` writes what is sent to `queue` (itself, or through other threads).
    fn new(
        queue: SyncSender<T>,
        thread: JoinHandle<io::Result<()>>,
        (stopped, panicked): (&'static str, &'static str),
    ) -> WriterThread<T> {
        WriterThread { queue: Some(queue), thread: Some(thread), stopped, panicked }
    }

    /// Queue `work` (unless the run is cancelled); where the thread has stopped, its error.
    fn send(&mut self, work: T) -> io::Result<()> {
        crate::cancel::check()?;
        if self.queue.as_ref().expect("open").send(work).is_err() {
            return Err(match self.thread.take().map(|w| w.join()) {
                Some(Ok(Err(e))) => e,
                _ => io::Error::other(self.stopped),
            });
        }
        Ok(())
    }

    /// Close the queue: the thread ends once it has done the work queued.
    fn close(&mut self) {
        self.queue = None;
    }

    /// [`WriterThread::close`], then the thread's result.
    fn finish(mut self) -> io::Result<()> {
        self.close();
        match self.thread.take().expect("writer").join() {
            Ok(r) => r,
            Err(_) => Err(io::Error::other(self.panicked)),
        }
    }
}

const WRITE_BLOCK: usize = 1 << 20;

/// Writes on a thread of its own, so that writing overlaps with building the output;
/// full blocks go one way, empty ones come back.
pub struct BackgroundWriter {
    pending: direct_io::Block,
    writer: WriterThread<direct_io::Block>,
    empty: Receiver<direct_io::Block>,
}

impl BackgroundWriter {
    fn new(mut file: DirectFile) -> BackgroundWriter {
        let (full_tx, full_rx) = sync_channel::<direct_io::Block>(2);
        let (empty_tx, empty_rx) = sync_channel::<direct_io::Block>(3);
        let thread = std::thread::spawn(move || {
            for mut block in full_rx {
                file.write_block(&block)?;
                block.clear();
                let _ = empty_tx.try_send(block);
            }
            file.flush()
        });
        let writer =
            WriterThread::new(full_tx, thread, ("the output writer stopped", "the output writer panicked"));
        BackgroundWriter { pending: direct_io::Block::new(WRITE_BLOCK), writer, empty: empty_rx }
    }

    fn send(&mut self) -> io::Result<()> {
        let next = self.empty.try_recv().unwrap_or_else(|_| direct_io::Block::new(WRITE_BLOCK));
        let block = std::mem::replace(&mut self.pending, next);
        self.writer.send(block)
    }

    fn finish(mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.send()?;
        }
        self.writer.finish()
    }
}

impl Write for BackgroundWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.pending.fill_from(buf);
        if self.pending.is_full() {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(gz) => gz.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.write_all(buf),
            Sink::Gzip(gz) => gz.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(_) | Sink::Gzip(_) => Ok(()),
        }
    }
}

const GZ_BLOCK: usize = 1 << 20;

struct GzBlock {
    seq: u64,
    data: Vec<u8>,
    last: bool,
}

struct Compressed {
    seq: u64,
    deflated: Vec<u8>,
    crc: u32,
    len: u64,
}

/// One gzip member made of independently deflated blocks (each ending in a sync
/// flush), as pigz writes it: every gzip reader reads it, and every core compresses.
pub struct ParallelGz {
    pending: Vec<u8>,
    seq: u64,
    /// The blocks go to the compressing workers, whose output the thread writes.
    writer: WriterThread<GzBlock>,
    workers: Vec<JoinHandle<()>>,
}

impl ParallelGz {
    pub fn new(file: File, level: u32) -> ParallelGz {
        let threads = crate::threads();
        let (job_tx, job_rx) = sync_channel::<GzBlock>(threads * 2);
        let (done_tx, done_rx) = sync_channel::<Compressed>(threads * 2);
        let job_rx = Arc::new(Mutex::new(job_rx));
        let workers = (0..threads)
            .map(|_| {
                let rx = job_rx.clone();
                let tx = done_tx.clone();
                std::thread::spawn(move || loop {
                    let block = match rx.lock().expect("job queue").recv() {
                        Ok(b) => b,
                        Err(_) => return,
                    };
                    if tx.send(deflate_block(block, level)).is_err() {
                        return;
                    }
                })
            })
            .collect();
        drop(done_tx);
        let thread = std::thread::spawn(move || write_member(file, done_rx));
        let writer = WriterThread::new(job_tx, thread, ("gzip compression stopped", "gzip writer panicked"));
        ParallelGz { pending: Vec::with_capacity(GZ_BLOCK), seq: 0, writer, workers }
    }

    fn send(&mut self, last: bool) -> io::Result<()> {
        let data = std::mem::replace(&mut self.pending, Vec::with_capacity(if last { 0 } else { GZ_BLOCK }));
        let block = GzBlock { seq: self.seq, data, last };
        self.seq += 1;
        self.writer.send(block)
    }

    pub fn finish(mut self) -> io::Result<()> {
        self.send(true)?;
        self.writer.close();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        self.writer.finish()
    }
}

impl Write for ParallelGz {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = GZ_BLOCK - self.pending.len();
        let n = room.min(buf.len());
        self.pending.extend_from_slice(&buf[..n]);
        if self.pending.len() == GZ_BLOCK {
            self.send(false)?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn deflate_block(block: GzBlock, level: u32) -> Compressed {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&block.data);
    let mut z = Compress::new(Compression::new(level), false);
    let mut out = Vec::with_capacity(block.data.len() / 3 + (64 << 10));
    let flush = if block.last { FlushCompress::Finish } else { FlushCompress::Sync };
    let mut input = &block.data[..];
    loop {
        if out.capacity() - out.len() < 32 << 10 {
            out.reserve(out.capacity());
        }
        let before = z.total_in();
        let status = z.compress_vec(input, &mut out, flush).expect("deflate of a memory buffer");
        input = &input[(z.total_in() - before) as usize..];
        // zlib has finished a flush when it leaves output space unused.
        let done = match flush {
            FlushCompress::Finish => status == Status::StreamEnd,
            _ => input.is_empty() && out.len() < out.capacity(),
        };
        if done {
            break;
        }
    }
    Compressed { seq: block.seq, deflated: out, crc: crc.finalize(), len: block.data.len() as u64 }
}

fn write_member(file: File, done: Receiver<Compressed>) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, file);
    out.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255])?;
    let mut waiting = std::collections::BTreeMap::new();
    let mut next = 0u64;
    let mut crc = crc32fast::Hasher::new();
    let mut total: u64 = 0;
    for block in done {
        waiting.insert(block.seq, block);
        while let Some(block) = waiting.remove(&next) {
            out.write_all(&block.deflated)?;
            crc.combine(&crc32fast::Hasher::new_with_initial_len(block.crc, block.len));
            total += block.len;
            next += 1;
        }
    }
    if !waiting.is_empty() {
        return Err(io::Error::other("a gzip block was lost"));
    }
    out.write_all(&crc.finalize().to_le_bytes())?;
    out.write_all(&(total as u32).to_le_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn parallel_gzip_is_one_member_any_reader_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.gz");
        let data: Vec<u8> = (0..5_000_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let mut gz = ParallelGz::new(File::create(&path).unwrap(), 3);
        for chunk in data.chunks(777_777) {
            gz.write_all(chunk).unwrap();
        }
        gz.finish().unwrap();
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(File::open(&path).unwrap()).read_to_end(&mut back).unwrap();
        assert!(back == data, "round trip");
    }

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
