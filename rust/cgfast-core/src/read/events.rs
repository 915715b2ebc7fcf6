//! Stream the elements of a trace's `traceEvents`, one at a time, validating the
//! JSON around them: for readers that need a few fields of each event and nothing of
//! the byte layout (the annotating pass indexes them in [`scan`](crate::read::scan);
//! both walk the one [`grammar`](crate::read::grammar)).

use std::path::Path;

use crate::json::{Cursor, Scan, StrSpan};
use crate::read::grammar::{Grammar, ScanFailure, Visit};
use crate::read::input::Window;
use crate::CancelToken;

/// Call `visit` with the cursor at each element of `traceEvents`; it must consume the
/// element. When the window ends inside an element `visit` returns
/// [`ScanError::Incomplete`](crate::json::ScanError::Incomplete) and is called again on
/// the same element with more input, so it must change nothing before the element is
/// fully read. `member(c, key)` is called at the value of every other top-level member
/// (`distributedInfo`, ...), under the same rule. `progress(file_bytes_read, file_len)`
/// is called per chunk; reading fails once `cancel` is cancelled. Returns the element
/// count.
pub(crate) fn for_each_event_and_member(
    path: &Path,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
    visit: &mut dyn FnMut(&mut Cursor<'_>) -> Scan<()>,
    member: &mut dyn FnMut(&mut Cursor<'_>, StrSpan) -> Scan<()>,
) -> Result<u64, ScanFailure> {
    let mut counted = Counted { visit, member, elements: 0 };
    Grammar::at_start().walk(&mut Window::open(path, cancel)?, &mut counted, progress)?;
    Ok(counted.elements)
}

/// Each element to the caller's `visit`, counted; other members to `member`.
struct Counted<'v> {
    visit: &'v mut dyn FnMut(&mut Cursor<'_>) -> Scan<()>,
    member: &'v mut dyn FnMut(&mut Cursor<'_>, StrSpan) -> Scan<()>,
    elements: u64,
}

impl Visit for Counted<'_> {
    fn element(&mut self, c: &mut Cursor<'_>, _base: u64) -> Scan<bool> {
        (self.visit)(c)?;
        self.elements += 1;
        Ok(true)
    }

    fn close(&mut self, _at: u64) -> bool {
        true
    }

    fn member(&mut self, c: &mut Cursor<'_>, key: StrSpan) -> Scan<()> {
        (self.member)(c, key)
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
        let mut visit = |c: &mut Cursor<'_>| {
            let start = c.pos;
            c.skip_value()?;
            seen.push(String::from_utf8_lossy(&c.buf[start..c.pos]).into_owned());
            Ok(())
        };
        for_each_event_and_member(&path, &CancelToken::new(), &mut |_, _| {}, &mut visit, &mut |c, _| {
            c.skip_value()
        })
        .map_err(|f| f.error(&path).to_string())?;
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
