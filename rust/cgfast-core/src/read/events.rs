//! Stream the elements of a trace's `traceEvents`, one at a time, validating the
//! JSON around them: for readers that need a few fields of each event and nothing of
//! the byte layout (the annotating pass keeps its own scanner in `scan`).

use std::path::Path;

use crate::json::{str_is, Cursor, Scan, ScanError};
use crate::read::input::Window;
use crate::read::scan::ScanFailure;

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

/// Call `visit` with the cursor at each element of `traceEvents`; it must consume the
/// element. When the window ends inside an element `visit` returns
/// [`ScanError::Incomplete`] and is called again on the same element with more input,
/// so it must change nothing before the element is fully read.
/// `progress(file_bytes_read, file_len)` is called per chunk. Returns the element count.
pub fn for_each_event(
    path: &Path,
    progress: &mut dyn FnMut(u64, u64),
    visit: &mut dyn FnMut(&mut Cursor<'_>) -> Scan<()>,
) -> Result<u64, ScanFailure> {
    let mut window = Window::open(path)?;
    let mut pos = 0usize;
    let mut eof = false;
    let mut state = State::Start;
    let mut saw_events = false;
    let mut elements = 0u64;
    loop {
        let base = window.base;
        let mut c = Cursor::new(window.bytes(), pos);
        let stopped = loop {
            pos = c.pos;
            if let Err(e) = step(&mut c, &mut state, &mut saw_events, &mut elements, visit) {
                break e;
            }
        };
        match stopped {
            ScanError::Syntax { at, expected } => {
                return Err(ScanFailure::Invalid(
                    format!("not a valid trace: expected {expected}"),
                    Some(base + at as u64),
                ));
            }
            ScanError::Incomplete if eof => {
                if state == State::End {
                    break;
                }
                let at = window.end();
                let what = if at == 0 {
                    "the file is empty"
                } else {
                    "the trace is truncated (unexpected end of input)"
                };
                return Err(ScanFailure::Invalid(what.into(), Some(at)));
            }
            ScanError::Incomplete => {
                window.consume(pos);
                pos = 0;
                if window.fill()? == 0 {
                    eof = true;
                }
                progress(window.file_position(), window.file_len());
            }
        }
    }
    if !saw_events {
        return Err(ScanFailure::Invalid("the trace has no traceEvents".into(), None));
    }
    Ok(elements)
}

/// One step of the grammar around the events; always ends in an error at the end of
/// the window (`Incomplete`) or of the file.
fn step(
    c: &mut Cursor<'_>,
    state: &mut State,
    saw_events: &mut bool,
    elements: &mut u64,
    visit: &mut dyn FnMut(&mut Cursor<'_>) -> Scan<()>,
) -> Scan<()> {
    match *state {
        State::Start => {
            c.expect(b'{', "a JSON object (a trace starts with '{')")?;
            *state = if c.peek()? == b'}' {
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
                if *saw_events {
                    return Err(ScanError::Syntax { at: k.start, expected: "a single traceEvents" });
                }
                if c.peek()? != b'[' {
                    return Err(ScanError::Syntax { at: c.pos, expected: "a list for traceEvents" });
                }
                *saw_events = true;
                *state = State::EventsOpen;
            } else {
                c.skip_value()?;
                *state = State::AfterMember;
            }
        }
        State::EventsOpen => {
            c.expect(b'[', "'['")?;
            if c.peek()? == b']' {
                c.pos += 1;
                *state = State::AfterMember;
            } else {
                *state = State::Event;
            }
        }
        State::Event => {
            c.peek()?;
            visit(c)?;
            *elements += 1;
            *state = State::AfterEvent;
        }
        State::AfterEvent => match c.peek()? {
            b',' => {
                c.pos += 1;
                *state = State::Event;
            }
            b']' => {
                c.pos += 1;
                *state = State::AfterMember;
            }
            _ => return Err(ScanError::Syntax { at: c.pos, expected: "',' or ']' between events" }),
        },
        State::AfterMember => match c.peek()? {
            b',' => {
                c.pos += 1;
                *state = State::Member;
            }
            b'}' => {
                c.pos += 1;
                *state = State::End;
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
    Ok(())
}

/// A failure to read `path` as one line.
pub fn describe(path: &Path, failure: ScanFailure) -> String {
    let shown = path.display();
    match failure {
        ScanFailure::Io(e) => format!("{shown}: {}", describe_io(&e)),
        ScanFailure::Invalid(msg, Some(at)) => format!("{shown}: {msg} at byte {at}"),
        ScanFailure::Invalid(msg, None) => format!("{shown}: {msg}"),
    }
}

fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::UnexpectedEof => "the gzip data is truncated".into(),
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
            format!("corrupt or unreadable data ({e})")
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Result<Vec<String>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, text).unwrap();
        let mut seen = Vec::new();
        for_each_event(&path, &mut |_, _| {}, &mut |c| {
            let start = c.pos;
            c.skip_value()?;
            seen.push(String::from_utf8_lossy(&c.buf[start..c.pos]).into_owned());
            Ok(())
        })
        .map_err(|f| describe(&path, f))?;
        Ok(seen)
    }

    #[test]
    fn visits_every_element_once() {
        let got = names(r#"{"a": [1, {"b": 2}], "traceEvents": [{"x": 1}, 2, "s"], "z": null}"#).unwrap();
        assert_eq!(got, vec![r#"{"x": 1}"#, "2", "\"s\""]);
        assert_eq!(names(r#"{"traceEvents": []}"#).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn refills_across_chunks() {
        let event = format!(r#"{{"name": "{}"}}"#, "k".repeat(3 << 20));
        let text = format!(r#"{{"traceEvents": [{}]}}"#, [event.as_str(); 5].join(","));
        assert_eq!(names(&text).unwrap().len(), 5);
    }

    #[test]
    fn reports_bad_input_in_one_line() {
        assert!(names("").unwrap_err().ends_with("the file is empty at byte 0"));
        assert!(names(r#"{"traceEvents": [1, 2"#).unwrap_err().contains("truncated"));
        assert!(names(r#"{"other": 1}"#).unwrap_err().ends_with("the trace has no traceEvents"));
        assert!(names(r#"{"traceEvents": [1 2]}"#)
            .unwrap_err()
            .contains("expected ',' or ']' between events at byte 19"));
        assert!(names(r#"{"traceEvents": {}}"#).unwrap_err().contains("a list for traceEvents"));
        assert!(names(r#"{"traceEvents": []} x"#).unwrap_err().contains("the end of the file"));
    }
}
