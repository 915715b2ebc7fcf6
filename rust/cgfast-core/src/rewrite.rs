//! Pass two: stream the input again and write it out, copying every untouched byte
//! and splicing in the events the passes changed.

use std::io::{self, Write};
use std::path::Path;

use crate::io::Chunks;
use crate::scan::Layout;

/// What happens to one element of `traceEvents`, in input order.
pub enum Change {
    Remove { span: crate::scan::Span, ordinal: u64 },
    Replace { span: crate::scan::Span, with: Box<dyn FnOnce(&[u8]) -> Vec<u8>> },
}

struct Window {
    chunks: Chunks,
    buf: Vec<u8>,
    base: u64,
    done: u64,
}

impl Window {
    fn ensure(&mut self, upto: u64) -> io::Result<()> {
        while self.base + (self.buf.len() as u64) < upto {
            let keep_from = (self.done - self.base) as usize;
            self.buf.drain(..keep_from);
            self.base = self.done;
            if self.chunks.fill(&mut self.buf)? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the trace changed while it was being read"));
            }
        }
        Ok(())
    }

    /// Write input bytes up to `upto` (absolute).
    fn copy_to(&mut self, out: &mut dyn Write, upto: u64) -> io::Result<()> {
        while self.done < upto {
            let have_end = self.base + self.buf.len() as u64;
            if self.done >= have_end {
                self.buf.clear();
                self.base = self.done;
                if self.chunks.fill(&mut self.buf)? == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the trace changed while it was being read"));
                }
                continue;
            }
            let end = upto.min(have_end);
            out.write_all(&self.buf[(self.done - self.base) as usize..(end - self.base) as usize])?;
            self.done = end;
        }
        Ok(())
    }

    fn skip_to(&mut self, to: u64) -> io::Result<()> {
        self.ensure(to)?;
        self.done = to;
        Ok(())
    }

    fn slice(&mut self, start: u64, end: u64) -> io::Result<&[u8]> {
        self.ensure(end)?;
        Ok(&self.buf[(start - self.base) as usize..(end - self.base) as usize])
    }
}

/// Rewrite `input` into `out`, applying `changes` (sorted by position) and appending
/// `appended` events at the end of `traceEvents`.
pub fn rewrite(
    input: &Path,
    layout: &Layout,
    changes: Vec<Change>,
    appended: &[String],
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64, u64),
) -> io::Result<()> {
    let chunks = Chunks::open(input)?;
    let mut w = Window { chunks, buf: Vec::with_capacity(8 << 20), base: 0, done: 0 };
    let mut removed: u64 = 0;
    let mut since_progress = 0u64;
    for change in changes {
        match change {
            Change::Replace { span, with } => {
                w.copy_to(out, span.start)?;
                let bytes = with(w.slice(span.start, span.end)?);
                out.write_all(&bytes)?;
                w.skip_to(span.end)?;
            }
            Change::Remove { span, ordinal } => {
                if removed == ordinal {
                    // Nothing before it survives: drop it with the separator after it.
                    w.copy_to(out, span.start)?;
                    w.skip_to(span.next_start)?;
                } else {
                    w.copy_to(out, span.prev_end)?;
                    w.skip_to(span.end)?;
                }
                removed += 1;
            }
        }
        if w.done - since_progress > 64 << 20 {
            since_progress = w.done;
            progress(w.chunks.file_position(), w.chunks.file_len);
        }
    }
    if !appended.is_empty() {
        w.copy_to(out, layout.array_close)?;
        if removed < layout.elements {
            out.write_all(b", ")?;
        }
        out.write_all(appended.join(", ").as_bytes())?;
    }
    w.copy_to(out, layout.total_len)?;
    progress(w.chunks.file_position(), w.chunks.file_len);
    Ok(())
}
