//! Where pass one found things in the (decompressed) input, for pass two: each
//! tracked event's and flow's bytes, and the places of the values an edit replaces.

use crate::json::InvalidUtf8;

/// Where a tracked event sits in the (decompressed) input, for pass two. The separators
/// around it are found again when it is removed (rarely): they are not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteSpan {
    pub(crate) start: u64,
    len: u32,
}

impl ByteSpan {
    pub(crate) fn new(start: u64, end: u64) -> ByteSpan {
        ByteSpan { start, len: (end - start) as u32 }
    }

    pub(crate) fn end(&self) -> u64 {
        self.start + self.len as u64
    }
}

/// The byte layout of `traceEvents` in the input.
#[derive(Clone, Debug, Default)]
pub(crate) struct Layout {
    /// One span per tracked event, in the order of `TraceIndex::events`.
    pub(crate) event_spans: Vec<ByteSpan>,
    /// One span per flow, in the order of `TraceIndex::flows`.
    pub(crate) flow_spans: Vec<ByteSpan>,
    /// Where to splice the edits of each tracked event, and of each flow.
    pub(crate) event_places: Vec<Places>,
    pub(crate) flow_places: Vec<FlowPlaces>,
    /// Offset of the `]` that closes `traceEvents`.
    pub(crate) array_close: u64,
    pub(crate) elements: u64,
    pub(crate) total_len: u64,
    /// The invalid UTF-8 in the trace's strings.
    pub(crate) invalid_utf8: InvalidUtf8,
}

impl Layout {
    /// Add the layout of the segment after this one, leaving its vectors empty.
    pub(crate) fn append(&mut self, next: &mut Layout) {
        self.event_spans.append(&mut next.event_spans);
        self.flow_spans.append(&mut next.flow_spans);
        self.event_places.append(&mut next.event_places);
        self.flow_places.append(&mut next.flow_places);
        self.elements += next.elements;
        self.array_close = next.array_close;
        self.total_len = next.total_len;
        self.invalid_utf8.add(next.invalid_utf8);
    }
}

/// A value's place in its event: offset and length, relative to the event's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rel {
    pub(crate) start: u16,
    pub(crate) len: u16,
}

impl Rel {
    pub(crate) const NONE: Rel = Rel { start: u16::MAX, len: 0 };

    pub(crate) fn of(at: Option<(usize, usize)>, event_start: usize) -> Option<Rel> {
        match at {
            None => Some(Rel::NONE),
            Some((s, e)) => {
                let (start, len) = (s - event_start, e - s);
                (start < u16::MAX as usize && len <= u16::MAX as usize)
                    .then_some(Rel { start: start as u16, len: len as u16 })
            }
        }
    }

    pub(crate) fn is_some(self) -> bool {
        self.start != u16::MAX
    }
}

/// Where pass two splices an event's edits; `exact` is false when it must parse instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Places {
    pub(crate) tid: Rel,
    pub(crate) ts: Rel,
    pub(crate) stream: Rel,
    pub(crate) node: Rel,
    /// Offset of the `}` closing `args` (`u16::MAX` without an args object).
    pub(crate) args_close: u16,
    pub(crate) args_empty: bool,
    pub(crate) exact: bool,
}

/// Where a flow's `tid` and `ts` are: all that pass two ever changes in a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FlowPlaces {
    tid: Rel,
    ts: Rel,
    exact: bool,
}

impl FlowPlaces {
    pub(crate) fn places(self) -> Places {
        Places { tid: self.tid, ts: self.ts, exact: self.exact, ..Places::INEXACT }
    }

    pub(crate) fn of(p: Places) -> FlowPlaces {
        FlowPlaces { tid: p.tid, ts: p.ts, exact: p.exact }
    }
}

impl Places {
    pub(crate) const INEXACT: Places = Places {
        tid: Rel::NONE,
        ts: Rel::NONE,
        stream: Rel::NONE,
        node: Rel::NONE,
        args_close: u16::MAX,
        args_empty: false,
        exact: false,
    };
}
