//! Reading traces plain or gzipped (detected by magic bytes), chunk by chunk.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use flate2::read::MultiGzDecoder;

use crate::CancelToken;

pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const CHUNK: usize = 1 << 20;

/// Whether the file starts with gzip's magic bytes.
pub(crate) fn is_gzip_file(path: &Path) -> io::Result<bool> {
    let mut magic = [0u8; 2];
    let n = read_full(&mut File::open(path)?, &mut magic)?;
    Ok(n == 2 && magic == GZIP_MAGIC)
}

pub(crate) fn is_gzip_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// Counts the bytes read from the file itself (compressed bytes for gzip).
struct Counted<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The decompressed bytes of a trace file; gzip is inflated on a thread of its own so
/// that scanning and inflating overlap.
struct Chunks {
    source: Source,
    file_len: u64,
    read: Arc<AtomicU64>,
}

enum Source {
    Plain(Counted<File>),
    /// Read or inflated on a thread of its own.
    Ahead(Ahead),
}

/// Chunks made on a thread of their own, each with `HEADROOM` bytes before its data:
/// what a window still holds moves there, and the chunk becomes the window without its
/// data being copied. Spent chunks go back to the thread.
struct Ahead {
    full: Receiver<io::Result<(Vec<u8>, usize)>>,
    spent: SyncSender<Vec<u8>>,
    thread: Option<JoinHandle<()>>,
}

const HEADROOM: usize = 64 << 10;
const AHEAD_CHUNK: usize = 256 << 10;

impl Ahead {
    fn start(source: impl Read + Send + 'static) -> Ahead {
        // one chunk waiting and one being read: ahead enough, and little memory
        let (full_tx, full) = sync_channel(1);
        let (spent, spent_rx) = sync_channel(2);
        let thread = std::thread::spawn(move || read_ahead(source, full_tx, spent_rx));
        Ahead { full, spent, thread: Some(thread) }
    }
}

fn read_ahead(
    mut source: impl Read,
    full: SyncSender<io::Result<(Vec<u8>, usize)>>,
    spent: Receiver<Vec<u8>>,
) {
    loop {
        let mut chunk = spent.try_recv().unwrap_or_else(|_| vec![0u8; HEADROOM + AHEAD_CHUNK]);
        let sent = match read_full(&mut source, &mut chunk[HEADROOM..]) {
            Ok(0) => return,
            Ok(n) => full.send(Ok((chunk, n))),
            Err(e) => full.send(Err(e)),
        };
        if sent.is_err() {
            return;
        }
    }
}

impl Chunks {
    /// The input from decompressed offset `start` (only 0 for gzip); `ahead`: a plain
    /// file is read on a thread of its own too.
    fn open(path: &Path, start: u64, ahead: bool) -> io::Result<Chunks> {
        let meta = std::fs::metadata(path)?;
        if meta.is_dir() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "is a directory"));
        }
        let gzip = is_gzip_file(path)?;
        if gzip && start != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a gzip stream is read from its start"));
        }
        // counts from `start`, so that progress is an offset in the file
        let read = Arc::new(AtomicU64::new(start));
        let mut inner = File::open(path)?;
        if start != 0 {
            use std::io::{Seek, SeekFrom};
            inner.seek(SeekFrom::Start(start))?;
        }
        let file = Counted { inner, count: read.clone() };
        let source = if gzip {
            Source::Ahead(Ahead::start(MultiGzDecoder::new(io::BufReader::with_capacity(1 << 20, file))))
        } else if ahead {
            Source::Ahead(Ahead::start(file))
        } else {
            Source::Plain(file)
        };
        Ok(Chunks { source, file_len: meta.len(), read })
    }

    /// Bytes of the file consumed so far (for progress).
    fn file_position(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }
}

/// A sliding view of the decompressed input: `bytes()` starts at input offset `base`.
/// The buffer is allocated (and zeroed) once and reused, so reading costs no memset.
pub(crate) struct Window {
    chunks: Chunks,
    /// Reading fails once this is cancelled (every read of a trace comes through here).
    cancel: CancelToken,
    data: Vec<u8>,
    /// Where in `data` the bytes held start, and how many there are.
    start: usize,
    filled: usize,
    pub(crate) base: u64,
}

impl Window {
    pub(crate) fn open(path: &Path, cancel: &CancelToken) -> io::Result<Window> {
        Self::open_at_in(path, 0, Vec::new(), cancel)
    }

    /// The input from (decompressed) offset `start`, held in `buffer` (what an earlier
    /// window gave back with [`Window::into_buffer`]): its memory is already mapped, so
    /// it is neither zeroed nor faulted in again.
    pub(crate) fn open_at_in(
        path: &Path,
        start: u64,
        buffer: Vec<u8>,
        cancel: &CancelToken,
    ) -> io::Result<Window> {
        Ok(Self::with(Chunks::open(path, start, false)?, start, buffer, cancel))
    }

    /// The buffer, for the next window.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.data
    }

    /// The input, read ahead on a thread of its own while the caller works on what it
    /// holds: for a caller that leaves a core free.
    pub(crate) fn open_read_ahead(path: &Path, cancel: &CancelToken) -> io::Result<Window> {
        Ok(Self::with(Chunks::open(path, 0, true)?, 0, Vec::new(), cancel))
    }

    fn with(chunks: Chunks, base: u64, buffer: Vec<u8>, cancel: &CancelToken) -> Window {
        let data = match chunks.source {
            Source::Plain(_) if buffer.len() >= 2 * CHUNK => buffer,
            Source::Plain(_) => vec![0; 2 * CHUNK],
            Source::Ahead(_) => Vec::new(),
        };
        Window { chunks, cancel: cancel.clone(), data, start: 0, filled: 0, base }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.start + self.filled]
    }

    /// Input offset just past the bytes held.
    pub(crate) fn end(&self) -> u64 {
        self.base + self.filled as u64
    }

    /// Forget the first `n` bytes held.
    pub(crate) fn consume(&mut self, n: usize) {
        assert!(n <= self.filled, "consumed more than held");
        self.start += n;
        self.filled -= n;
        self.base += n as u64;
    }

    /// Room in `data` for `n` more bytes after the `filled` held from `start`, which
    /// move to its front.
    fn make_room(data: &mut Vec<u8>, start: &mut usize, filled: usize, n: usize) {
        data.copy_within(*start..*start + filled, 0);
        *start = 0;
        if data.len() < filled + n {
            data.resize(filled + n.max(CHUNK), 0);
        }
    }

    /// Read more input after the bytes held; 0 at the end of the input. Fails once the
    /// run is cancelled.
    pub(crate) fn fill(&mut self) -> io::Result<usize> {
        self.cancel.check()?;
        match &mut self.chunks.source {
            Source::Plain(file) => {
                if self.data.len() - (self.start + self.filled) < CHUNK {
                    Self::make_room(&mut self.data, &mut self.start, self.filled, 2 * CHUNK);
                }
                let at = self.start + self.filled;
                let n = read_full(file, &mut self.data[at..at + CHUNK])?;
                self.filled += n;
                Ok(n)
            }
            Source::Ahead(ahead) => match ahead.full.recv() {
                Ok(Ok((mut chunk, n))) => {
                    let held = self.filled;
                    if held <= HEADROOM {
                        chunk[HEADROOM - held..HEADROOM]
                            .copy_from_slice(&self.data[self.start..self.start + held]);
                        let spent = std::mem::replace(&mut self.data, chunk);
                        if spent.len() == HEADROOM + AHEAD_CHUNK {
                            let _ = ahead.spent.try_send(spent);
                        }
                        self.start = HEADROOM - held;
                    } else {
                        // more held than the headroom takes (an element over 64 KB): the
                        // chunk is copied after it
                        Self::make_room(&mut self.data, &mut self.start, held, n);
                        self.data[held..held + n].copy_from_slice(&chunk[HEADROOM..HEADROOM + n]);
                        let _ = ahead.spent.try_send(chunk);
                    }
                    self.filled += n;
                    Ok(n)
                }
                Ok(Err(e)) => Err(e),
                Err(_) => {
                    if let Some(thread) = ahead.thread.take() {
                        let _ = thread.join();
                    }
                    Ok(0)
                }
            },
        }
    }

    pub(crate) fn file_position(&self) -> u64 {
        self.chunks.file_position()
    }

    pub(crate) fn file_len(&self) -> u64 {
        self.chunks.file_len
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Read a whole (small) file, inflating it if it is gzipped.
pub(crate) fn read_all(path: &Path) -> io::Result<Vec<u8>> {
    let raw = std::fs::read(path)?;
    if raw.starts_with(&GZIP_MAGIC) {
        let mut out = Vec::new();
        MultiGzDecoder::new(&raw[..]).read_to_end(&mut out)?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use std::io::Write;

    /// Read all of `window`, holding back tails of every size (none, small, over
    /// the read-ahead headroom, over a chunk): what it holds is always the file's bytes.
    fn walk(mut window: Window, expected: &[u8]) {
        let tails = [0usize, 1, 7, 4096, HEADROOM, HEADROOM + 1, 300_000, CHUNK + 5];
        let mut round = 0;
        loop {
            assert_eq!(window.bytes(), &expected[window.base as usize..window.end() as usize]);
            let tail = tails[round % tails.len()].min(window.bytes().len());
            window.consume(window.bytes().len() - tail);
            round += 1;
            if window.fill().unwrap() == 0 {
                break;
            }
        }
        assert_eq!(window.end(), expected.len() as u64);
    }

    #[test]
    fn windows_hold_the_input_however_much_they_keep() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..5_300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let plain = dir.path().join("t.json");
        std::fs::write(&plain, &data).unwrap();
        let gz = dir.path().join("t.json.gz");
        let mut enc = flate2::write::GzEncoder::new(File::create(&gz).unwrap(), Compression::fast());
        enc.write_all(&data).unwrap();
        enc.finish().unwrap();
        let run = CancelToken::new();
        walk(Window::open(&plain, &run).unwrap(), &data);
        walk(Window::open_read_ahead(&plain, &run).unwrap(), &data);
        walk(Window::open(&gz, &run).unwrap(), &data);
        walk(Window::open_read_ahead(&gz, &run).unwrap(), &data);
        let mut from = Window::open_at_in(&plain, 1_000_003, Vec::new(), &run).unwrap();
        from.fill().unwrap();
        assert_eq!(&from.bytes()[..10], &data[1_000_003..1_000_013]);
    }
}
