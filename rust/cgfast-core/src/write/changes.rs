//! What pass two changes, in input order (events and flow arrows merged by their place
//! in `traceEvents`), and the lane names it appends.

use crate::index::keys::{KeyId, Num, Spelling};
use crate::index::{Flow, TraceIndex, NONE};
use crate::json::quote;
use crate::passes;
use crate::read::scan::Layout;
use crate::write::rewrite::{Action, Change};

/// The `thread_name` event of a lane the passes named.
pub(crate) fn thread_name_event(
    index: &TraceIndex,
    annotated: &passes::Annotated,
    (tid, spelling): (KeyId, Spelling),
) -> String {
    let tid = index.keys.key(tid);
    format!(
        "{{\"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"name\": \"thread_name\", \"args\": {{\"name\": {}}}}}",
        index.keys.to_json_spelled(annotated.gpu_pid, annotated.gpu_pid_spelling),
        index.keys.to_json_spelled(tid, spelling),
        quote(&format!("stream {}", index.keys.py_str_spelled(tid, spelling)))
    )
}

/// Where a flow-finish event ends: its event's final lane and start.
pub(crate) fn flow_place(index: &TraceIndex, f: &Flow) -> (KeyId, Option<Num>) {
    if f.follows == NONE {
        return (f.current_tid(), None);
    }
    let target = &index.events[f.follows as usize];
    (target.current_tid(), target.new_ts())
}

/// Whether a flow arrow is written differently.
pub(crate) fn flow_changed(index: &TraceIndex, f: &Flow) -> bool {
    let (tid, ts) = flow_place(index, f);
    f.removed() || tid != f.tid || ts.is_some()
}

/// The elements to change, in input order: tracked events first numbered, then flows.
pub(crate) fn changes<'a>(index: &'a TraceIndex, layout: &'a Layout) -> impl Iterator<Item = Change> + 'a {
    let events =
        index.events.iter().zip(&layout.event_spans).enumerate().filter(|(_, (e, _))| e.changed()).map(
            |(i, (e, span))| {
                let action = if e.removed() { Action::Remove } else { Action::Replace { id: i } };
                Change { span: *span, ordinal: e.ordinal as u64, action }
            },
        );
    let n = index.events.len();
    let flows = index
        .flows
        .iter()
        .zip(&layout.flow_spans)
        .enumerate()
        .filter(|(_, (f, _))| flow_changed(index, f))
        .map(move |(j, (f, span))| {
            let action = if f.removed() { Action::Remove } else { Action::Replace { id: n + j } };
            Change { span: *span, ordinal: f.ordinal as u64, action }
        });
    merge_by_ordinal(events, flows)
}

fn merge_by_ordinal(
    a: impl Iterator<Item = Change>,
    b: impl Iterator<Item = Change>,
) -> impl Iterator<Item = Change> {
    let mut a = a.peekable();
    let mut b = b.peekable();
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) => {
            if x.ordinal < y.ordinal {
                a.next()
            } else {
                b.next()
            }
        }
        (Some(_), None) => a.next(),
        (None, _) => b.next(),
    })
}
