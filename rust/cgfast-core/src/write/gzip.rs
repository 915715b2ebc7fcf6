//! gzip on all cores: blocks deflated in parallel into one gzip member.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use flate2::{Compress, Compression, FlushCompress, Status};

use crate::write::sink::WriterThread;
use crate::CancelToken;

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
pub(crate) struct ParallelGz {
    pending: Vec<u8>,
    seq: u64,
    /// The blocks go to the compressing workers, whose output the thread writes.
    writer: WriterThread<GzBlock>,
    workers: Vec<JoinHandle<()>>,
}

impl ParallelGz {
    /// Compress at `level` on `threads` threads into `file`; fails once `cancel` is cancelled.
    pub(crate) fn new(file: File, level: u32, threads: usize, cancel: &CancelToken) -> ParallelGz {
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
        let writer =
            WriterThread::new(job_tx, thread, ("gzip compression stopped", "gzip writer panicked"), cancel);
        ParallelGz { pending: Vec::with_capacity(GZ_BLOCK), seq: 0, writer, workers }
    }

    fn send(&mut self, last: bool) -> io::Result<()> {
        let data = std::mem::replace(&mut self.pending, Vec::with_capacity(if last { 0 } else { GZ_BLOCK }));
        let block = GzBlock { seq: self.seq, data, last };
        self.seq += 1;
        self.writer.send(block)
    }

    pub(crate) fn finish(mut self) -> io::Result<()> {
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
        let mut gz = ParallelGz::new(File::create(&path).unwrap(), 3, 4, &CancelToken::new());
        for chunk in data.chunks(777_777) {
            gz.write_all(chunk).unwrap();
        }
        gz.finish().unwrap();
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(File::open(&path).unwrap()).read_to_end(&mut back).unwrap();
        assert!(back == data, "round trip");
    }
}
