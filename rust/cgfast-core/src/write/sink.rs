//! Where a rewritten trace goes: a plain file written on a thread of its own, or gzip
//! compressed on all cores ([`crate::write::gzip`]).

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::write::direct_io::{self, DirectFile};
use crate::write::gzip::ParallelGz;
use crate::{CancelToken, WriteMode};

/// Where a rewritten trace goes: plain, or gzip compressed in parallel blocks.
pub(crate) enum Sink {
    Plain(BackgroundWriter),
    Gzip(ParallelGz),
}

impl Sink {
    /// A gzip output at `level` on `threads` threads, or a plain one written in `mode`;
    /// writing fails once `cancel` is cancelled.
    pub(crate) fn new(file: File, gzip: Option<(u32, usize)>, mode: WriteMode, cancel: &CancelToken) -> Sink {
        match gzip {
            Some((level, threads)) => Sink::Gzip(ParallelGz::new(file, level, threads, cancel)),
            None => Sink::Plain(BackgroundWriter::new(DirectFile::new(file, mode), cancel)),
        }
    }

    /// Write what is left and wait for the writing threads.
    pub(crate) fn finish(self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.finish(),
            Sink::Gzip(gz) => gz.finish(),
        }
    }
}

/// Work for a thread that writes the output, through a bounded queue: what it fails
/// with is what sending (when it has stopped) and finishing report.
pub(crate) struct WriterThread<T> {
    queue: Option<SyncSender<T>>,
    cancel: CancelToken,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// The errors where the thread stopped without one of its own, or panicked.
    stopped: &'static str,
    panicked: &'static str,
}

impl<T> WriterThread<T> {
    /// `thread` writes what is sent to `queue` (itself, or through other threads).
    pub(crate) fn new(
        queue: SyncSender<T>,
        thread: JoinHandle<io::Result<()>>,
        (stopped, panicked): (&'static str, &'static str),
        cancel: &CancelToken,
    ) -> WriterThread<T> {
        WriterThread { queue: Some(queue), cancel: cancel.clone(), thread: Some(thread), stopped, panicked }
    }

    /// Queue `work` (unless the run is cancelled); where the thread has stopped, its error.
    pub(crate) fn send(&mut self, work: T) -> io::Result<()> {
        self.cancel.check()?;
        if self.queue.as_ref().expect("open").send(work).is_err() {
            return Err(match self.thread.take().map(|w| w.join()) {
                Some(Ok(Err(e))) => e,
                _ => io::Error::other(self.stopped),
            });
        }
        Ok(())
    }

    /// Close the queue: the thread ends once it has done the work queued.
    pub(crate) fn close(&mut self) {
        self.queue = None;
    }

    /// [`WriterThread::close`], then the thread's result.
    pub(crate) fn finish(mut self) -> io::Result<()> {
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
pub(crate) struct BackgroundWriter {
    pending: direct_io::Block,
    writer: WriterThread<direct_io::Block>,
    empty: Receiver<direct_io::Block>,
}

impl BackgroundWriter {
    fn new(mut file: DirectFile, cancel: &CancelToken) -> BackgroundWriter {
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
        let stopped = ("the output writer stopped", "the output writer panicked");
        let writer = WriterThread::new(full_tx, thread, stopped, cancel);
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
