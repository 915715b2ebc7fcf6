//! Writing large outputs around the page cache. A buffered write of a gigabyte makes the
//! kernel find a gigabyte of fresh page cache, which costs more than the rest of a run
//! on machines whose free memory is handed back to a hypervisor (and evicts what other
//! work had cached). Whole aligned blocks go to the device with `O_DIRECT` instead; the
//! unaligned tail, and every block on a file system that refuses direct I/O, is written
//! the ordinary way.

use std::fs::File;
use std::io::{self, Write};

/// Alignment of buffers, lengths and offsets that direct I/O accepts on any device.
pub const ALIGN: usize = 4096;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; ALIGN]);

/// A fixed-size byte buffer aligned for direct I/O, filled from the front.
pub struct Block {
    pages: Vec<Page>,
    len: usize,
}

impl Block {
    /// A block of `capacity` bytes (rounded up to whole pages).
    pub fn new(capacity: usize) -> Block {
        Block { pages: vec![Page([0; ALIGN]); capacity.div_ceil(ALIGN)], len: 0 }
    }

    pub fn capacity(&self) -> usize {
        self.pages.len() * ALIGN
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == self.capacity()
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Append as much of `bytes` as fits; how much did.
    pub fn fill_from(&mut self, bytes: &[u8]) -> usize {
        let n = (self.capacity() - self.len).min(bytes.len());
        let start = self.len;
        self.all_mut()[start..start + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        n
    }

    pub fn bytes(&self) -> &[u8] {
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

/// A file written block by block, directly to the device while it can be.
pub struct DirectFile {
    file: File,
    direct: bool,
}

impl DirectFile {
    /// Write `file` (positioned at 0) directly when `wanted` and its file system allows.
    pub fn new(file: File, wanted: bool) -> DirectFile {
        let direct = wanted && set_direct(&file, true).is_ok();
        DirectFile { file, direct }
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Write a block: directly if it is a whole number of pages (every block but the
    /// last), else the ordinary way from then on.
    pub fn write_block(&mut self, block: &Block) -> io::Result<()> {
        let bytes = block.bytes();
        if !self.direct || bytes.len() % ALIGN != 0 {
            self.buffered()?;
            return self.file.write_all(bytes);
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

    fn buffered(&mut self) -> io::Result<()> {
        if self.direct {
            set_direct(&self.file, false)?;
            self.direct = false;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
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

    fn write_blocks(dir: &std::path::Path, wanted: bool, data: &[u8], block_size: usize) -> (Vec<u8>, bool) {
        let path = dir.join(format!("out-{wanted}-{block_size}"));
        let mut out = DirectFile::new(File::create(&path).unwrap(), wanted);
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
        for wanted in [true, false] {
            for block_size in [ALIGN, 16 * ALIGN] {
                let (back, _) = write_blocks(dir.path(), wanted, &data, block_size);
                assert!(back == data, "direct={wanted} block={block_size}");
            }
        }
        let (back, _) = write_blocks(dir.path(), true, &data[..100], ALIGN);
        assert_eq!(back, &data[..100]);
    }
}
