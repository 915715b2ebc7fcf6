//! The one grammar around a trace's events, `{ …, "traceEvents": [ event, … ], … }`:
//! a state machine that checks the JSON outside the events, refills the window as it
//! runs dry and hands each element of `traceEvents` to a [`Visit`]. The streaming
//! reader ([`events`](crate::read::events)) and the indexing scan
//! ([`scan`](crate::read::scan)), whole or in parallel segments, both walk it.

use std::path::Path;

use crate::json::{str_is, Cursor, InvalidUtf8, Scan, ScanError, StrSpan};
use crate::read::input::Window;
use crate::Error;

#[derive(Debug)]
pub(crate) enum ScanFailure {
    Io(std::io::Error),
    /// Not a trace: the message, and the byte offset in the decompressed input.
    Invalid(String, Option<u64>),
}

impl From<std::io::Error> for ScanFailure {
    fn from(e: std::io::Error) -> Self {
        ScanFailure::Io(e)
    }
}

impl ScanFailure {
    /// The failure to read the trace `path`, as a run's error.
    pub(crate) fn error(self, path: &Path) -> Error {
        match self {
            ScanFailure::Io(e) => Error::read(path, e),
            ScanFailure::Invalid(message, offset) => {
                Error::Syntax { path: path.to_path_buf(), message, offset }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Member,
    EventsOpen,
    Event,
    AfterEvent,
    AfterMember,
    End,
}

/// What the walk does with each element of `traceEvents`.
pub(crate) trait Visit {
    /// The element at `c.pos` (its first byte, at `base + c.pos` in the input): consume
    /// it and return `true`, or return `false` to stop the walk before it. When the
    /// window ends inside the element, return [`ScanError::Incomplete`] having changed
    /// nothing: the element is visited again with more input.
    fn element(&mut self, c: &mut Cursor<'_>, base: u64) -> Scan<bool>;

    /// The `]` closing `traceEvents`, at `at` in the input: `true` to walk on past it,
    /// `false` to stop the walk before it.
    fn close(&mut self, at: u64) -> bool;

    /// The value of a top-level member other than `traceEvents` (named `key`), at
    /// `c.pos`: consume it, changing nothing before it is fully read (as
    /// [`element`](Visit::element)). Skipped unless a reader wants it.
    fn member(&mut self, c: &mut Cursor<'_>, _key: StrSpan) -> Scan<()> {
        c.skip_value()
    }
}

/// Where a walk is in the grammar.
pub(crate) struct Grammar {
    state: State,
    saw_events: bool,
    /// The invalid UTF-8 in the strings walked so far, by offset in the input.
    pub(crate) invalid_utf8: InvalidUtf8,
}

enum Step {
    Go,
    Stop,
}

impl Grammar {
    /// At the start of a trace.
    pub(crate) fn at_start() -> Grammar {
        Grammar { state: State::Start, saw_events: false, invalid_utf8: InvalidUtf8::default() }
    }

    /// At an element of `traceEvents` (the start of a parallel scan's later segment).
    pub(crate) fn at_event() -> Grammar {
        Grammar { state: State::Event, saw_events: true, invalid_utf8: InvalidUtf8::default() }
    }

    /// Walk `window` from its start to the end of the input, or to where `visit` stops
    /// it, refilling the window as it runs dry; `progress(input_bytes_read, input_len)`
    /// is called per refill. Returns the offset in the input where the walk ended.
    pub(crate) fn walk(
        &mut self,
        window: &mut Window,
        visit: &mut impl Visit,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, ScanFailure> {
        let mut pos: usize = 0;
        let mut eof = false;
        loop {
            let base = window.base;
            let mut c = Cursor::new(window.bytes(), pos);
            let stopped = loop {
                pos = c.pos;
                let step = self.step(&mut c, base, visit);
                // what a step read counts once it is done (a step cut short by the end of
                // the window is read again, whole, with more input)
                if step.is_ok() && c.invalid_utf8.count > 0 {
                    let found = std::mem::take(&mut c.invalid_utf8);
                    self.invalid_utf8
                        .add(InvalidUtf8 { first_at: found.first_at.map(|at| base + at), ..found });
                }
                match step {
                    Ok(Step::Go) => {}
                    other => break other,
                }
            };
            match stopped {
                Ok(_) => return Ok(base + c.pos as u64),
                Err(ScanError::Syntax { at, expected }) => {
                    return Err(ScanFailure::Invalid(
                        format!("not a valid trace: expected {expected}"),
                        Some(base + at as u64),
                    ));
                }
                Err(ScanError::Incomplete) if eof => {
                    if self.state == State::End {
                        if !self.saw_events {
                            return Err(ScanFailure::Invalid("the trace has no traceEvents".into(), None));
                        }
                        return Ok(window.end());
                    }
                    let at = window.end();
                    let what = if at == 0 {
                        "the file is empty"
                    } else {
                        "the trace is truncated (unexpected end of input)"
                    };
                    return Err(ScanFailure::Invalid(what.into(), Some(at)));
                }
                Err(ScanError::Incomplete) => {
                    window.consume(pos);
                    pos = 0;
                    if window.fill()? == 0 {
                        eof = true;
                    }
                    progress(window.file_position(), window.file_len());
                }
            }
        }
    }

    /// One step of the grammar; the walk always ends in an error at the end of the
    /// window (`Incomplete`) or of the file, or where `visit` stops it.
    #[inline(always)]
    fn step(&mut self, c: &mut Cursor<'_>, base: u64, visit: &mut impl Visit) -> Scan<Step> {
        match self.state {
            State::Start => {
                c.expect(b'{', "a JSON object (a trace starts with '{')")?;
                self.state = if c.peek()? == b'}' {
                    c.pos += 1;
                    State::End
                } else {
                    State::Member
                };
            }
            State::Member => {
                let k = c.string()?;
                c.expect(b':', "':'")?;
                if str_is(c.buf, k, "traceEvents") {
                    if self.saw_events {
                        return Err(ScanError::Syntax { at: k.start, expected: "a single traceEvents" });
                    }
                    if c.peek()? != b'[' {
                        return Err(ScanError::Syntax { at: c.pos, expected: "a list for traceEvents" });
                    }
                    self.saw_events = true;
                    self.state = State::EventsOpen;
                } else {
                    visit.member(c, k)?;
                    self.state = State::AfterMember;
                }
            }
            State::EventsOpen => {
                c.expect(b'[', "'['")?;
                if c.peek()? == b']' {
                    return self.close(c, base, visit);
                }
                self.state = State::Event;
            }
            State::Event => {
                c.peek()?;
                if !visit.element(c, base)? {
                    return Ok(Step::Stop);
                }
                self.state = State::AfterEvent;
            }
            State::AfterEvent => match c.peek()? {
                b',' => {
                    c.pos += 1;
                    self.state = State::Event;
                }
                b']' => return self.close(c, base, visit),
                _ => return Err(ScanError::Syntax { at: c.pos, expected: "',' or ']' between events" }),
            },
            State::AfterMember => match c.peek()? {
                b',' => {
                    c.pos += 1;
                    self.state = State::Member;
                }
                b'}' => {
                    c.pos += 1;
                    self.state = State::End;
                }
                _ => return Err(ScanError::Syntax { at: c.pos, expected: "',' or '}'" }),
            },
            State::End => {
                c.peek()?;
                return Err(ScanError::Syntax {
                    at: c.pos,
                    expected: "the end of the file after the trace object",
                });
            }
        }
        Ok(Step::Go)
    }

    /// At the `]` closing `traceEvents`.
    fn close(&mut self, c: &mut Cursor<'_>, base: u64, visit: &mut impl Visit) -> Scan<Step> {
        if !visit.close(base + c.pos as u64) {
            return Ok(Step::Stop);
        }
        c.pos += 1;
        self.state = State::AfterMember;
        Ok(Step::Go)
    }
}
