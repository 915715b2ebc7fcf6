//! Pass two: stream the input again and write it out, copying every untouched byte
//! and splicing in the events the passes changed.

use std::io::{self, Write};
use std::path::Path;

use crate::read::input::Window;
use crate::read::layout::{ByteSpan, Layout};
use crate::CancelToken;

/// What happens to one element of `traceEvents`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Remove it with the `,` before it and what follows that `,`, keeping any white
    /// space before the `,`: that is the input's own where an earlier run appended the
    /// element (it writes `, ` after it), so that appending it again gives back the same
    /// bytes. (Profilers write the `,` right after an element.)
    Remove,
    /// Replace it with what the edit callback writes for `id`.
    Replace { id: usize },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Change {
    pub(crate) span: ByteSpan,
    /// Position in `traceEvents`.
    pub(crate) ordinal: u64,
    pub(crate) action: Action,
}

/// The input as pass two walks it: `done` is how far it has been written out.
struct InputCursor {
    window: Window,
    done: u64,
}

fn changed_under_us() -> io::Error {
    io::Error::other("the trace changed while it was being read")
}

/// Why a rewrite failed: reading the input again, or writing the output.
#[derive(Debug)]
pub(crate) enum RewriteError {
    Input(io::Error),
    Output(io::Error),
}

use RewriteError::{Input, Output};

impl InputCursor {
    /// Hold the input up to `upto`, keeping what is not yet written.
    fn ensure(&mut self, upto: u64) -> io::Result<()> {
        while self.window.end() < upto {
            let written = (self.done - self.window.base) as usize;
            self.window.consume(written);
            if self.window.fill()? == 0 {
                return Err(changed_under_us());
            }
        }
        Ok(())
    }

    /// Write input bytes up to `upto` (absolute).
    fn copy_to(&mut self, out: &mut dyn Write, upto: u64) -> Result<(), RewriteError> {
        while self.done < upto {
            if self.done >= self.window.end() {
                let all = self.window.bytes().len();
                self.window.consume(all);
                if self.window.fill().map_err(Input)? == 0 {
                    return Err(Input(changed_under_us()));
                }
                continue;
            }
            let end = upto.min(self.window.end());
            let base = self.window.base;
            out.write_all(&self.window.bytes()[(self.done - base) as usize..(end - base) as usize])
                .map_err(Output)?;
            self.done = end;
        }
        Ok(())
    }

    fn skip_to(&mut self, to: u64) -> io::Result<()> {
        self.ensure(to)?;
        self.done = to;
        Ok(())
    }

    /// Where the separator before the element at `start` starts: its `,`.
    fn previous_separator(&mut self, start: u64) -> io::Result<u64> {
        self.ensure(start)?;
        let base = self.window.base;
        let held = &self.window.bytes()[(self.done - base) as usize..(start - base) as usize];
        let gap = held.iter().rev().take_while(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t')).count();
        if held.len() == gap || held[held.len() - gap - 1] != b',' {
            return Err(changed_under_us());
        }
        Ok(start - gap as u64 - 1)
    }

    /// Where the element after the one ending at `end` starts (or the closing `]`).
    fn next_element(&mut self, end: u64) -> io::Result<u64> {
        let mut at = end;
        let mut seen_comma = false;
        loop {
            self.ensure(at + 1)?;
            let base = self.window.base;
            match self.window.bytes()[(at - base) as usize] {
                b' ' | b'\n' | b'\r' | b'\t' => at += 1,
                b',' if !seen_comma => {
                    seen_comma = true;
                    at += 1;
                }
                _ => return Ok(at),
            }
        }
    }

    fn slice(&mut self, start: u64, end: u64) -> io::Result<&[u8]> {
        self.ensure(end)?;
        let base = self.window.base;
        Ok(&self.window.bytes()[(start - base) as usize..(end - base) as usize])
    }
}

/// Writes the replacement of event `id` (its original bytes given) into the buffer.
pub(crate) type EditEvent<'a> = dyn FnMut(usize, &[u8], &mut Vec<u8>) + 'a;

/// Elements appended at the end of `traceEvents`.
pub(crate) trait Appended {
    /// Write them (one or more), separated by commas.
    fn write_to(&self, out: &mut dyn Write) -> io::Result<()>;
}

impl Appended for String {
    fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(self.as_bytes())
    }
}

/// Rewrite `input` into `out`, applying `changes` (in input order; `edit(id, original,
/// replacement)` writes each replacement) and appending what `appended()` gives (asked
/// for at the end, so that it can be made meanwhile) at the end of `traceEvents`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rewrite<'a>(
    input: &Path,
    layout: &Layout,
    changes: impl Iterator<Item = Change>,
    edit: &mut EditEvent,
    appended: &mut dyn FnMut() -> Vec<Box<dyn Appended + 'a>>,
    out: &mut dyn Write,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), RewriteError> {
    let mut replacement = Vec::with_capacity(4096);
    let mut w = InputCursor { window: Window::open_read_ahead(input, cancel).map_err(Input)?, done: 0 };
    let mut removed: u64 = 0;
    let mut since_progress = 0u64;
    for change in changes {
        let span = change.span;
        match change.action {
            Action::Replace { id } => {
                w.copy_to(out, span.start)?;
                replacement.clear();
                edit(id, w.slice(span.start, span.end()).map_err(Input)?, &mut replacement);
                out.write_all(&replacement).map_err(Output)?;
                w.skip_to(span.end()).map_err(Input)?;
            }
            Action::Remove => {
                if removed == change.ordinal {
                    // Nothing before it survives: drop it with the separator after it.
                    w.copy_to(out, span.start)?;
                    let next = w.next_element(span.end()).map_err(Input)?;
                    w.skip_to(next).map_err(Input)?;
                } else {
                    let separator = w.previous_separator(span.start).map_err(Input)?;
                    w.copy_to(out, separator)?;
                    w.skip_to(span.end()).map_err(Input)?;
                }
                removed += 1;
            }
        }
        if w.done - since_progress > 64 << 20 {
            since_progress = w.done;
            progress(w.window.file_position(), w.window.file_len());
        }
    }
    let appended = appended();
    if !appended.is_empty() {
        w.copy_to(out, layout.array_close)?;
        let mut append = || {
            if removed < layout.elements {
                out.write_all(b", ")?;
            }
            for (i, event) in appended.iter().enumerate() {
                if i > 0 {
                    out.write_all(b", ")?;
                }
                event.write_to(out)?;
            }
            Ok(())
        };
        append().map_err(Output)?;
    }
    w.copy_to(out, layout.total_len)?;
    progress(w.window.file_position(), w.window.file_len());
    Ok(())
}
