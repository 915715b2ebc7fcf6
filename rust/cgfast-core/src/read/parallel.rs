//! The parallel scan: a plain trace cut into segments at guessed element boundaries,
//! scanned by whichever thread is free and joined in order (a guess that turns out to
//! be no boundary makes the caller scan the trace whole).

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::index::TraceIndex;
use crate::read::event_fields::WriteKeys;
use crate::read::grammar::{Grammar, ScanFailure};
use crate::read::layout::Layout;
use crate::read::scan::Segment;
use crate::CancelToken;

/// Where an element probably starts after `from`: the `{` of `}` `,` `{` (white space
/// allowed), with the end of the element before it. Only a guess: a string can hold it.
pub(crate) fn guess_boundary(path: &Path, from: u64) -> std::io::Result<Option<(u64, u64)>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    // most events are short: look at a little first
    for size in [64 << 10, 1 << 20] {
        file.seek(SeekFrom::Start(from))?;
        let mut buf = vec![0u8; size];
        let n = file.read(&mut buf)?;
        if let Some((start, end)) = boundary_in(&buf[..n]) {
            return Ok(Some((from + start as u64, from + end as u64)));
        }
        if n < size {
            break;
        }
    }
    Ok(None)
}

/// The first `}` `,` `{` in `buf`: where the `{` is and where the element before ends.
pub(crate) fn boundary_in(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while let Some(k) = memchr::memchr(b'}', &buf[i..]) {
        let close = i + k;
        let mut j = close + 1;
        while j < buf.len() && matches!(buf[j], b' ' | b'\n' | b'\r' | b'\t') {
            j += 1;
        }
        if buf.get(j) == Some(&b',') {
            j += 1;
            while j < buf.len() && matches!(buf[j], b' ' | b'\n' | b'\r' | b'\t') {
                j += 1;
            }
            if buf.get(j) == Some(&b'{') {
                return Some((j, close + 1));
            }
        }
        i = close + 1;
    }
    None
}

type Scanned = (TraceIndex, Layout);

/// Plain traces are cut into segments, none shorter than this, scanned by whichever
/// thread is free, so that a slow stretch (or a busy core) does not hold the others up.
pub(crate) const SEGMENT_BYTES: u64 = 4 << 20;
/// At most this many segments.
pub(crate) const MAX_SEGMENTS: usize = 128;

/// Where segments are cut: each takes about a `2 × threads`-th of what is left, but
/// none more than a half of `MAX_SEGMENTS`-th of the trace nor less than `min_bytes`.
/// Short segments keep the joined index growing in order while the threads scan (see
/// [`Joined`]); shorter ones at the end let the threads end together.
pub(crate) fn segment_cuts(len: u64, threads: usize, min_bytes: u64) -> Vec<u64> {
    let mut cuts = Vec::new();
    let mut from = 0;
    let most = min_bytes.max(len / (MAX_SEGMENTS as u64 / 2));
    while cuts.len() + 1 < MAX_SEGMENTS {
        from += ((len - from) / (2 * threads as u64)).clamp(min_bytes, most);
        if from + min_bytes / 2 >= len {
            break;
        }
        cuts.push(from);
    }
    cuts
}

/// Scan a plain trace in segments cut at guessed element boundaries, on `threads`
/// threads; `None` when it has no boundary to cut at, or a cut turns out not to be one.
pub(crate) fn scan_parallel(
    path: &Path,
    write_keys: &WriteKeys,
    threads: usize,
    segment_bytes: u64,
    len: u64,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<Scanned>, ScanFailure> {
    let cuts = element_cuts(path, len, threads, segment_bytes)?;
    if cuts.is_empty() {
        return Ok(None);
    }
    let segments = Segments::new(path, len, write_keys, cancel, cuts);
    let threads = threads.min(segments.count());
    let (finished_tx, finished_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let finished = finished_tx.clone();
            let segments = &segments;
            scope.spawn(move || {
                segments.scan_while_any_left();
                let _ = finished.send(());
            });
        }
        drop(finished_tx);
        segments.report_progress(&finished_rx, threads, len, progress);
    });
    Ok(segments.into_scanned())
}

/// Where the segments start (each at an element, with the end of the element before
/// it): one at or after each of [`segment_cuts`] that has a guessed boundary.
fn element_cuts(
    path: &Path,
    len: u64,
    threads: usize,
    segment_bytes: u64,
) -> std::io::Result<Vec<(u64, u64)>> {
    let mut cuts: Vec<(u64, u64)> = Vec::new();
    // a trace under `2 × threads` segments long still gets that many
    let min_bytes = segment_bytes.min(len / (2 * threads as u64)).max(1);
    for at in segment_cuts(len, threads, min_bytes) {
        if let Some(cut) = guess_boundary(path, at)? {
            if cuts.last().is_none_or(|last| cut.0 > last.0) {
                cuts.push(cut);
            }
        }
    }
    Ok(cuts)
}

/// The segments of a parallel scan, taken in turn by whichever thread is free.
struct Segments<'k> {
    path: &'k Path,
    len: u64,
    write_keys: &'k WriteKeys,
    cancel: &'k CancelToken,
    /// Where segment `k + 1` starts, and where the element before it ends.
    cuts: Vec<(u64, u64)>,
    /// Bytes scanned by each segment, for progress.
    done: Vec<AtomicU64>,
    /// The next segment to scan.
    next: AtomicUsize,
    joined: std::sync::Mutex<Joined<'k>>,
    /// The emptied vectors of joined segments, for segments still to scan: their
    /// memory is already mapped.
    spares: std::sync::Mutex<Vec<Spare>>,
}

impl<'k> Segments<'k> {
    fn new(
        path: &'k Path,
        len: u64,
        write_keys: &'k WriteKeys,
        cancel: &'k CancelToken,
        cuts: Vec<(u64, u64)>,
    ) -> Self {
        Segments {
            path,
            len,
            write_keys,
            cancel,
            done: (0..cuts.len() + 1).map(|_| AtomicU64::new(0)).collect(),
            cuts,
            next: AtomicUsize::new(0),
            joined: std::sync::Mutex::new(Joined {
                scanned: None,
                next: 0,
                waiting: Vec::new(),
                failed: false,
            }),
            spares: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn count(&self) -> usize {
        self.cuts.len() + 1
    }

    /// Scan segments until none is left (or one failed), each through the same buffer.
    fn scan_while_any_left(&self) {
        let mut buffer = Vec::new();
        loop {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            if k >= self.count() {
                break;
            }
            let scanned = self.scan_one(k, &mut buffer);
            match scanned {
                Some(segment) => {
                    let emptied = lock(&self.joined).add(k, segment);
                    let mut spares = lock(&self.spares);
                    if self.next.load(Ordering::Relaxed) < self.count() {
                        spares.extend(emptied);
                    } else {
                        spares.clear();
                    }
                }
                None => {
                    lock(&self.joined).failed = true;
                    self.next.store(self.count(), Ordering::Relaxed);
                }
            }
        }
    }

    /// Segment `k`, scanned; `None` when it failed or its end is no element boundary
    /// (a split inside a string, say): the single scan decides.
    fn scan_one(&self, k: usize, buffer: &mut Vec<u8>) -> Option<Segment<'k>> {
        let (start, grammar, prev_end) = match k {
            0 => (0, Grammar::at_start(), None),
            _ => (self.cuts[k - 1].0, Grammar::at_event(), Some(self.cuts[k - 1].1)),
        };
        let stop = self.cuts.get(k).map(|c| c.0);
        let spare = lock(&self.spares).pop();
        let scanned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut segment = Segment::new(self.write_keys, self.cancel, prev_end, stop);
            if let Some(spare) = spare {
                spare.lend(&mut segment);
            }
            // the first segment's vectors take every other segment's entries;
            // the others' grow as they need, their room kept for the next
            if k == 0 {
                segment.make_room(self.len);
            }
            segment
                .run(grammar, self.path, start, buffer, &mut |d, _| {
                    self.done[k].store(d - start, Ordering::Relaxed)
                })
                .map(|_| segment)
        }));
        let segment = scanned.ok()?.ok()?;
        let whole = !segment.missed_stop
            && (k == 0 || segment.layout.elements > 0)
            && (k + 1 == self.count() || segment.prev_end == Some(self.cuts[k].1));
        whole.then_some(segment)
    }

    /// Report the bytes scanned every 50 ms until the `threads` threads have finished.
    fn report_progress(
        &self,
        finished: &std::sync::mpsc::Receiver<()>,
        threads: usize,
        len: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) {
        let mut running = threads;
        while running > 0 {
            match finished.recv_timeout(std::time::Duration::from_millis(50)) {
                Ok(()) => running -= 1,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    progress(self.done.iter().map(|d| d.load(Ordering::Relaxed)).sum(), len)
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    /// The whole trace's index and layout, if every segment was scanned and joined.
    fn into_scanned(self) -> Option<Scanned> {
        let count = self.count();
        let joined = self.joined.into_inner().unwrap_or_else(|e| e.into_inner());
        match joined.scanned {
            Some(scanned) if !joined.failed && joined.next == count => Some(scanned),
            _ => None,
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The segments scanned so far, joined in order as each one's turn comes.
struct Joined<'k> {
    scanned: Option<Scanned>,
    /// The segment whose turn it is, and those that finished before theirs.
    next: usize,
    waiting: Vec<(usize, Segment<'k>)>,
    failed: bool,
}

impl<'k> Joined<'k> {
    /// Segment `k`, scanned: joined, with any that waited for it. Returns the vectors
    /// of those joined, emptied.
    fn add(&mut self, k: usize, segment: Segment<'k>) -> Vec<Spare> {
        let mut emptied = Vec::new();
        self.waiting.push((k, segment));
        while let Some(at) = self.waiting.iter().position(|(k, _)| *k == self.next) {
            let (_, mut segment) = self.waiting.swap_remove(at);
            match &mut self.scanned {
                None => self.scanned = Some((segment.index, segment.layout)),
                Some((index, layout)) => {
                    index.append(&mut segment.index, layout.elements as u32);
                    layout.append(&mut segment.layout);
                    emptied.push(Spare::of(segment));
                }
            }
            self.next += 1;
        }
        emptied
    }
}

/// Empty vectors of a joined segment.
struct Spare {
    events: Vec<crate::index::Tracked>,
    flows: Vec<crate::index::Flow>,
    layout: Layout,
}

impl Spare {
    /// The vectors of a joined segment (emptied by joining it), without its counts.
    fn of(segment: Segment<'_>) -> Spare {
        let Layout { event_spans, flow_spans, event_places, flow_places, .. } = segment.layout;
        let layout = Layout { event_spans, flow_spans, event_places, flow_places, ..Layout::default() };
        Spare { events: segment.index.events, flows: segment.index.flows, layout }
    }

    fn lend(self, segment: &mut Segment<'_>) {
        (segment.index.events, segment.index.flows, segment.layout) = (self.events, self.flows, self.layout);
    }
}
