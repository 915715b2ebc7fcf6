//! Writing large outputs fast. A buffered write costs what the kernel pays to find page
//! cache for it: little where memory is warm, but on machines whose free memory goes
//! back to a hypervisor a fresh gigabyte costs more than the rest of a run. So a large
//! output starts buffered, in small writes (which take small folios, cheap to find),
//! and goes to the device with `O_DIRECT` once buffered writing turns out slower than a
//! device would be. The unaligned tail, and every block on a file system that refuses
//! direct I/O, is written the ordinary way.

use std::fs::File;
use std::io::{self, Write};

use crate::WriteMode;

/// Alignment of buffers, lengths and offsets that direct I/O accepts on any device.
pub(crate) const ALIGN: usize = 4096;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; ALIGN]);

/// A fixed-size byte buffer aligned for direct I/O, filled from the front.
pub(crate) struct Block {
    pages: Vec<Page>,
    len: usize,
}

impl Block {
    /// A block of `capacity` bytes (rounded up to whole pages).
    pub(crate) fn new(capacity: usize) -> Block {
        Block { pages: vec![Page([0; ALIGN]); capacity.div_ceil(ALIGN)], len: 0 }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.pages.len() * ALIGN
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len == self.capacity()
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// Append as much of `bytes` as fits; how much did.
    pub(crate) fn fill_from(&mut self, bytes: &[u8]) -> usize {
        let n = (self.capacity() - self.len).min(bytes.len());
        let start = self.len;
        self.all_mut()[start..start + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        n
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `Page` is `repr(C)` over a byte array, so the pages are
        // `capacity()` initialised, contiguous bytes.
        let all = unsafe { std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>(), self.capacity()) };
        &all[..self.len]
    }

    fn all_mut(&mut self) -> &mut [u8] {
        let capacity = self.capacity();
        // SAFETY: as in `bytes`, and the borrow of `self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), capacity) }
    }
}

/// Buffered writes go in pieces of this size.
const BUFFERED_PIECE: usize = 64 << 10;
/// Buffered writing is judged over this many bytes at a time ...
const JUDGED_OVER: u64 = 8 << 20;
/// ... and given up for direct I/O when it takes longer than this per megabyte (a
/// solid-state device takes well under).
const SLOWER_THAN_A_DEVICE: std::time::Duration = std::time::Duration::from_millis(1);

/// A file written block by block, directly to the device while it can be.
pub(crate) struct DirectFile {
    file: File,
    /// `Direct` only once the file's descriptor has `O_DIRECT` set.
    mode: WriteMode,
    /// Bytes and time of the buffered writes being judged (in `Adaptive` mode).
    judged: (u64, std::time::Duration),
    judged_over: u64,
    limit: std::time::Duration,
}

impl DirectFile {
    /// Write `file` (positioned at 0) in `mode`; direct modes only where its file system allows.
    pub(crate) fn new(file: File, mode: WriteMode) -> DirectFile {
        let mode = match mode {
            WriteMode::Direct if set_direct(&file, true).is_err() => WriteMode::Buffered,
            mode => mode,
        };
        DirectFile {
            file,
            mode,
            judged: (0, std::time::Duration::ZERO),
            judged_over: JUDGED_OVER,
            limit: SLOWER_THAN_A_DEVICE,
        }
    }

    pub(crate) fn is_direct(&self) -> bool {
        self.mode == WriteMode::Direct
    }

    /// Write a block: directly if it is a whole number of pages (every block but the
    /// last), else the ordinary way from then on.
    pub(crate) fn write_block(&mut self, block: &Block) -> io::Result<()> {
        let bytes = block.bytes();
        if !self.is_direct() || bytes.len() % ALIGN != 0 {
            if self.is_direct() {
                self.buffered()?;
            }
            return self.write_buffered(bytes);
        }
        let mut written = 0;
        while written < bytes.len() {
            match self.file.write(&bytes[written..]) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "failed to write the output")),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The file system takes no direct I/O after all.
                Err(e) if e.raw_os_error() == Some(EINVAL) && written == 0 => {
                    self.buffered()?;
                    break;
                }
                Err(e) => return Err(e),
            }
            // A short write leaves the offset unaligned: the rest goes buffered.
            if written % ALIGN != 0 {
                self.buffered()?;
                break;
            }
        }
        self.file.write_all(&bytes[written..])
    }

    fn write_buffered(&mut self, bytes: &[u8]) -> io::Result<()> {
        let started = std::time::Instant::now();
        for piece in bytes.chunks(BUFFERED_PIECE) {
            self.file.write_all(piece)?;
        }
        // Judged on whole blocks only, so that the file stays aligned for direct I/O.
        if self.mode == WriteMode::Adaptive && bytes.len() % ALIGN == 0 {
            self.judged.0 += bytes.len() as u64;
            self.judged.1 += started.elapsed();
            if self.judged.0 >= self.judged_over {
                let megabytes = self.judged.0 as f64 / (1 << 20) as f64;
                if self.judged.1.as_secs_f64() > self.limit.as_secs_f64() * megabytes {
                    self.mode = if set_direct(&self.file, true).is_ok() {
                        WriteMode::Direct
                    } else {
                        WriteMode::Buffered
                    };
                }
                self.judged = (0, std::time::Duration::ZERO);
            }
        }
        Ok(())
    }

    /// Buffered from now on.
    fn buffered(&mut self) -> io::Result<()> {
        if self.is_direct() {
            set_direct(&self.file, false)?;
        }
        self.mode = WriteMode::Buffered;
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(target_os = "linux")]
const EINVAL: i32 = libc::EINVAL;
#[cfg(not(target_os = "linux"))]
const EINVAL: i32 = 22;

#[cfg(target_os = "linux")]
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this `File` owns, with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_direct(_file: &File, on: bool) -> io::Result<()> {
    if on {
        Err(io::Error::new(io::ErrorKind::Unsupported, "direct I/O is used on Linux only"))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_blocks(
        dir: &std::path::Path,
        mode: WriteMode,
        data: &[u8],
        block_size: usize,
    ) -> (Vec<u8>, bool) {
        let path = dir.join(format!("out-{mode:?}-{block_size}"));
        let mut out = DirectFile::new(File::create(&path).unwrap(), mode);
        let started_direct = out.is_direct();
        let mut block = Block::new(block_size);
        let mut rest = data;
        while !rest.is_empty() {
            let n = block.fill_from(rest);
            rest = &rest[n..];
            if block.is_full() {
                out.write_block(&block).unwrap();
                block.clear();
            }
        }
        if !block.is_empty() {
            out.write_block(&block).unwrap();
        }
        out.flush().unwrap();
        drop(out);
        (std::fs::read(&path).unwrap(), started_direct)
    }

    #[test]
    fn slow_buffered_writing_goes_direct_and_keeps_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let data: Vec<u8> = (0..(40 * ALIGN + 17)).map(|i| (i * 13 % 251) as u8).collect();
        let mut out = DirectFile::new(File::create(&path).unwrap(), WriteMode::Adaptive);
        (out.judged_over, out.limit) = (2 * ALIGN as u64, std::time::Duration::ZERO);
        let mut went_direct = false;
        for chunk in data.chunks(4 * ALIGN) {
            let mut block = Block::new(4 * ALIGN);
            block.fill_from(chunk);
            out.write_block(&block).unwrap();
            went_direct |= out.is_direct();
        }
        drop(out);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        // tmpfs and some other file systems take no direct I/O: then it stays buffered
        if set_direct(&File::open(&path).unwrap(), true).is_ok() {
            assert!(went_direct);
        }
    }

    #[test]
    fn blocks_are_aligned_and_keep_their_bytes() {
        let mut b = Block::new(3 * ALIGN + 1);
        assert_eq!(b.capacity(), 4 * ALIGN);
        assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 0);
        assert_eq!(b.fill_from(b"abc"), 3);
        assert_eq!(b.fill_from(&vec![7u8; 5 * ALIGN]), 4 * ALIGN - 3);
        assert!(b.is_full());
        assert_eq!(&b.bytes()[..4], b"abc\x07");
    }

    #[test]
    fn what_is_written_directly_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..(5 * ALIGN * 16 + 1234)).map(|i| (i * 7 % 251) as u8).collect();
        for mode in [WriteMode::Direct, WriteMode::Buffered, WriteMode::Adaptive] {
            for block_size in [ALIGN, 16 * ALIGN] {
                let (back, _) = write_blocks(dir.path(), mode, &data, block_size);
                assert!(back == data, "{mode:?} block={block_size}");
            }
        }
        let (back, _) = write_blocks(dir.path(), WriteMode::Direct, &data[..100], ALIGN);
        assert_eq!(back, &data[..100]);
    }
}
