//! One streaming read of a trace, keeping only the graphed GPU work: per kernel its
//! interval, device, replay, annotation value and name.

use std::path::Path;

use crate::index::keys::{Num, Strings};
use crate::index::Cat;
use crate::json::{text_of, Cursor, Scalar, Scan, StrSpan};
use crate::read::events::for_each_event_and_member;
use crate::{CancelToken, Error};

use super::time::micros_to_nanos;

/// No value: the kernel lacks the annotation key, or has no `correlation`.
pub(crate) const NONE: u32 = u32::MAX;

/// A graphed kernel, memcpy or memset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Kernel {
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// The event's `pid` (its GPU), by id in [`Kernels::devices`].
    pub(crate) device: u32,
    /// `args.correlation`: the launch (replay) it belongs to; `None` without one.
    pub(crate) replay: Option<i64>,
    /// `args[KEY]` by id in [`Kernels::values`]; [`NONE`] when unannotated.
    pub(crate) value: u32,
    /// Its `name`, by id in [`Kernels::names`].
    pub(crate) name: u32,
    /// `args[FALLBACK]` by id in [`Kernels::fallback_values`] (see [`read_keys`]).
    pub(crate) fallback: u32,
    /// The executable graph of its node (`graph node id >> 32`; 0 where it is no integer).
    pub(crate) graph: u64,
    /// `args.flops` and `args.bytes` (capture-time counts), where it carries either.
    pub(crate) counts: Option<Counts>,
    /// `args.dtype` by id in [`Kernels::dtypes`]; [`NONE`] without one.
    pub(crate) dtype: u32,
}

/// A kernel's capture-time counts; one of the two it lacks reads as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub(crate) flops: f64,
    pub(crate) bytes: f64,
}

/// What a read of one trace keeps.
#[derive(Default, Debug)]
pub(crate) struct Kernels {
    pub(crate) kernels: Vec<Kernel>,
    pub(crate) values: Strings,
    pub(crate) fallback_values: Strings,
    pub(crate) names: Strings,
    pub(crate) devices: Strings,
    pub(crate) dtypes: Strings,
    /// `deviceProperties[].name`: the GPUs the trace records.
    pub(crate) gpu_names: Vec<String>,
    pub(crate) events: u64,
    /// Work events with `graph node id` missing or 0 (eager launches): not summarised.
    pub(crate) ungraphed: u64,
    pub(crate) ungraphed_ns: i64,
    /// Correlations of `cudaGraphLaunch` calls.
    pub(crate) graph_launches: rustc_hash::FxHashSet<i64>,
    /// (correlation, duration) of the work without a `graph node id` that has a
    /// correlation: launched by a graph, it is work whose replay cgfast left unresolved.
    pub(crate) ungraphed_correlated: Vec<(i64, i64)>,
    /// Graphed work events without a usable `ts` and `dur`.
    pub(crate) unusable: u64,
    /// Work without a node id that annotate marked (`args["cgfast"]`) as left by an
    /// ambiguous replay: count and nanoseconds; not in `ungraphed_correlated`.
    pub(crate) ambiguous: (u64, i64),
    /// The same for unmatched replays.
    pub(crate) unmatched: (u64, i64),
    /// The trace's `distributedInfo.rank`, where it has one.
    pub(crate) rank: Option<u64>,
}

#[derive(Default)]
struct Fields {
    cat: Option<Scalar>,
    name: Option<Scalar>,
    pid: Option<Scalar>,
    ts: Option<Scalar>,
    dur: Option<Scalar>,
    node: Option<Scalar>,
    graph_id: Option<Scalar>,
    correlation: Option<Scalar>,
    value: Option<Scalar>,
    fallback: Option<Scalar>,
    marker: Option<Scalar>,
    flops: Option<Scalar>,
    bytes: Option<Scalar>,
    dtype: Option<Scalar>,
    /// `args.launch_phase`, read when grouping by `launch` (see [`LAUNCH_KEY`]).
    phase: Option<Scalar>,
}

/// Grouped by this key, a kernel whose `args.launch_phase` says `backward` is told apart
/// from the forward kernels of the same line: its value reads `LINE [backward]`.
const LAUNCH_KEY: &[u8] = b"launch";

fn key_is(buf: &[u8], key: StrSpan, want: &[u8]) -> bool {
    key_bytes(buf, key).as_ref() == want
}

fn key_bytes(buf: &[u8], key: StrSpan) -> std::borrow::Cow<'_, [u8]> {
    if key.escaped {
        std::borrow::Cow::Owned(text_of(buf, key).into_owned().into_bytes())
    } else {
        std::borrow::Cow::Borrowed(&buf[key.start..key.end])
    }
}

fn read_fields(c: &mut Cursor<'_>, by: &[u8], fallback: Option<&[u8]>) -> Scan<Fields> {
    let mut f = Fields::default();
    c.object(|c, key| {
        let buf = c.buf;
        let slot = match key_bytes(buf, key).as_ref() {
            b"cat" => &mut f.cat,
            b"name" => &mut f.name,
            b"pid" => &mut f.pid,
            b"ts" => &mut f.ts,
            b"dur" => &mut f.dur,
            b"args" if c.peek()? == b'{' => {
                // A later `args` replaces an earlier one, as a JSON parser would have it.
                (f.node, f.graph_id, f.correlation, f.value, f.fallback, f.marker) =
                    (None, None, None, None, None, None);
                (f.flops, f.bytes, f.dtype, f.phase) = (None, None, None, None);
                return c.object(|c, key| {
                    let buf = c.buf;
                    let by_key = key_is(buf, key, by);
                    let fallback_key = fallback.is_some_and(|f| key_is(buf, key, f));
                    let slot = if key_is(buf, key, b"graph node id") {
                        Some(&mut f.node)
                    } else if key_is(buf, key, b"correlation") {
                        Some(&mut f.correlation)
                    } else if key_is(buf, key, b"graph id") {
                        Some(&mut f.graph_id)
                    } else if key_is(buf, key, b"cgfast") {
                        Some(&mut f.marker)
                    } else if key_is(buf, key, b"flops") {
                        Some(&mut f.flops)
                    } else if key_is(buf, key, b"bytes") {
                        Some(&mut f.bytes)
                    } else if key_is(buf, key, b"dtype") {
                        Some(&mut f.dtype)
                    } else if by == LAUNCH_KEY && key_is(buf, key, b"launch_phase") {
                        Some(&mut f.phase)
                    } else {
                        None
                    };
                    if slot.is_none() && !by_key && !fallback_key {
                        return c.skip_value();
                    }
                    let v = c.scalar()?;
                    if by_key {
                        f.value = Some(v);
                    }
                    if fallback_key {
                        f.fallback = Some(v);
                    }
                    if let Some(slot) = slot {
                        *slot = Some(v);
                    }
                    Ok(())
                });
            }
            b"args" => {
                (f.node, f.graph_id, f.correlation, f.value, f.fallback, f.marker) =
                    (None, None, None, None, None, None);
                (f.flops, f.bytes, f.dtype, f.phase) = (None, None, None, None);
                return c.skip_value();
            }
            _ => return c.skip_value(),
        };
        *slot = Some(c.scalar()?);
        Ok(())
    })?;
    Ok(f)
}

fn number(buf: &[u8], s: Option<Scalar>) -> Option<&[u8]> {
    match s {
        Some(Scalar::Number { start, end }) => Some(&buf[start..end]),
        _ => None,
    }
}

/// A count: a non-negative number, or a string holding one (annotation values are
/// written as Python's `str()` of them).
fn count(buf: &[u8], s: Option<Scalar>) -> Option<f64> {
    let n: f64 = match s? {
        Scalar::Number { start, end } => std::str::from_utf8(&buf[start..end]).ok()?.parse().ok()?,
        Scalar::Str(span) => text_of(buf, span).trim().parse().ok()?,
        _ => return None,
    };
    (n.is_finite() && n >= 0.0).then_some(n)
}

/// The text a value is grouped by: strings as they read, anything else as its JSON.
fn value_text(buf: &[u8], s: Scalar) -> Option<std::borrow::Cow<'_, str>> {
    match s {
        Scalar::Null => None,
        Scalar::Str(span) => Some(text_of(buf, span)),
        Scalar::Bool(b) => Some(if b { "true" } else { "false" }.into()),
        Scalar::Number { start, end } | Scalar::Container { start, end } => {
            Some(String::from_utf8_lossy(&buf[start..end]))
        }
    }
}

impl Kernels {
    fn keep(&mut self, buf: &[u8], f: Fields) {
        self.events += 1;
        let cat = match f.cat {
            Some(Scalar::Str(span)) => Cat::from_name(&text_of(buf, span)),
            _ => Cat::Other,
        };
        let correlation = || {
            number(buf, f.correlation).and_then(|t| match Num::parse(t) {
                Some(Num::Int(i)) => Some(i),
                _ => None,
            })
        };
        if cat == Cat::Runtime
            && matches!(f.name, Some(Scalar::Str(span)) if crate::index::is_graph_launch(&text_of(buf, span)))
        {
            self.graph_launches.extend(correlation());
        }
        if !cat.is_work() {
            return;
        }
        let ts = number(buf, f.ts).and_then(micros_to_nanos);
        let dur = number(buf, f.dur).and_then(micros_to_nanos);
        let node = crate::read::decode::node_of(buf, f.node, f.graph_id);
        if !node.graphed() {
            self.ungraphed += 1;
            self.ungraphed_ns += dur.unwrap_or(0).max(0);
            let marker = match f.marker {
                Some(Scalar::Str(span)) => crate::index::ReplayMarker::from_text(&text_of(buf, span)),
                _ => crate::index::ReplayMarker::None,
            };
            let marked = match marker {
                crate::index::ReplayMarker::Ambiguous => Some(&mut self.ambiguous),
                crate::index::ReplayMarker::Unmatched => Some(&mut self.unmatched),
                crate::index::ReplayMarker::None => None,
            };
            if let Some((count, ns)) = marked {
                *count += 1;
                *ns += dur.unwrap_or(0).max(0);
            } else if let Some(c) = correlation() {
                self.ungraphed_correlated.push((c, dur.unwrap_or(0).max(0)));
            }
            return;
        }
        let (Some(start), Some(dur)) = (ts, dur) else {
            self.unusable += 1;
            return;
        };
        if dur < 0 {
            self.unusable += 1;
            return;
        }
        let name = match f.name {
            Some(Scalar::Str(span)) => self.names.intern(&text_of(buf, span)),
            _ => self.names.intern("?"),
        };
        let device = match f.pid.and_then(|p| value_text(buf, p)) {
            Some(text) => self.devices.intern(&text),
            None => self.devices.intern(""),
        };
        let replay = number(buf, f.correlation).and_then(|t| match Num::parse(t) {
            Some(Num::Int(i)) => Some(i),
            _ => None,
        });
        let value = match (f.value.and_then(|v| value_text(buf, v)), f.phase) {
            (Some(text), Some(Scalar::Str(phase))) => {
                self.values.intern(&format!("{text} [{}]", text_of(buf, phase)))
            }
            (Some(text), _) => self.values.intern(&text),
            (None, _) => NONE,
        };
        let fallback = match f.fallback.and_then(|v| value_text(buf, v)) {
            Some(text) => self.fallback_values.intern(&text),
            None => NONE,
        };
        let graph = match node {
            crate::index::Node::Id(id) => (id >> 32) as u64,
            _ => 0,
        };
        let counts = match (count(buf, f.flops), count(buf, f.bytes)) {
            (None, None) => None,
            (flops, bytes) => Some(Counts { flops: flops.unwrap_or(0.0), bytes: bytes.unwrap_or(0.0) }),
        };
        let dtype = match f.dtype.and_then(|v| value_text(buf, v)) {
            Some(text) => self.dtypes.intern(&text),
            None => NONE,
        };
        self.kernels.push(Kernel {
            start,
            end: start.saturating_add(dur),
            device,
            replay,
            value,
            name,
            fallback,
            graph,
            counts,
            dtype,
        });
    }
}

/// Read the graphed work of `path`, grouped later by `args[by]`.
pub(crate) fn read(
    path: &Path,
    by: &str,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Kernels, Error> {
    read_keys(path, by, None, cancel, progress)
}

/// [`read`], keeping `args[fallback]` of each kernel too ([`Kernel::fallback`]), for
/// a key to group by where the trace does not carry `by`.
pub(crate) fn read_keys(
    path: &Path,
    by: &str,
    fallback: Option<&str>,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Kernels, Error> {
    let mut kept = Kernels::default();
    let by = by.as_bytes();
    let fallback = fallback.map(str::as_bytes);
    let mut rank = None;
    let mut gpu_names = Vec::new();
    for_each_event_and_member(
        path,
        cancel,
        progress,
        &mut |c| {
            if c.peek()? != b'{' {
                kept.events += 1;
                return c.skip_value();
            }
            let fields = read_fields(c, by, fallback)?;
            kept.keep(c.buf, fields);
            Ok(())
        },
        &mut |c, key| {
            if key_is(c.buf, key, b"deviceProperties") {
                if let Scalar::Container { start, end } = c.scalar()? {
                    gpu_names = device_names(&c.buf[start..end]);
                }
                return Ok(());
            }
            if !key_is(c.buf, key, b"distributedInfo") || c.peek()? != b'{' {
                return c.skip_value();
            }
            let mut found = None;
            c.object(|c, key| match key_is(c.buf, key, b"rank") {
                true => {
                    found = number(c.buf, Some(c.scalar()?)).and_then(|t| match Num::parse(t) {
                        Some(Num::Int(i)) => u64::try_from(i).ok(),
                        _ => None,
                    });
                    Ok(())
                }
                false => c.skip_value(),
            })?;
            rank = found;
            Ok(())
        },
    )
    .map_err(|f| f.error(path))?;
    kept.rank = rank;
    kept.gpu_names = gpu_names;
    Ok(kept)
}

/// The `name` of each GPU of a `deviceProperties` array.
fn device_names(array: &[u8]) -> Vec<String> {
    let Ok(serde_json::Value::Array(devices)) = serde_json::from_slice(array) else {
        return Vec::new();
    };
    devices.iter().filter_map(|d| d["name"].as_str().map(str::to_string)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str, by: &str) -> Kernels {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, text).unwrap();
        read(&path, by, &CancelToken::new(), &mut |_, _| {}).unwrap()
    }

    #[test]
    fn keeps_graphed_work_only() {
        let trace = r#"{"traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 100.5, "dur": 2, "args": {"correlation": 5, "graph node id": 9, "name": "layer.0"}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "copy", "pid": 0, "tid": 7, "ts": 103, "dur": 1.25, "args": {"graph node id": 10, "correlation": 5}},
            {"ph": "X", "cat": "kernel", "name": "eager", "pid": 0, "tid": 7, "ts": 200, "dur": 3, "args": {"graph node id": 0}},
            {"ph": "X", "cat": "kernel", "name": "eager2", "pid": 0, "tid": 7, "ts": 210, "dur": 4, "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 100, "dur": 50, "args": {"graph node id": 3, "name": "x"}},
            {"ph": "X", "cat": "kernel", "name": "odd", "pid": 0, "tid": 7, "ts": "late", "dur": 1, "args": {"graph node id": 4}},
            {"ph": "X", "cat": "kernel", "name": "k\"2", "pid": 1, "tid": 8, "ts": 100, "dur": 1, "args": {"graph node id": 11, "name": {"nested": 1}, "correlation": 6}},
            [1, 2]
        ]}"#;
        let k = read_text(trace, "name");
        assert_eq!(k.events, 8);
        assert_eq!((k.ungraphed, k.ungraphed_ns, k.unusable), (2, 7_000, 1));
        assert_eq!(k.kernels.len(), 3);
        let first = k.kernels[0];
        assert_eq!((first.start, first.end, first.replay), (100_500, 102_500, Some(5)));
        assert_eq!(k.values.get(first.value), "layer.0");
        assert_eq!(k.names.get(first.name), "k1");
        assert_eq!(k.kernels[1].value, NONE);
        assert_eq!(k.values.get(k.kernels[2].value), r#"{"nested": 1}"#);
        assert_eq!(k.names.get(k.kernels[2].name), "k\"2");
        assert_ne!(k.kernels[2].device, first.device);
    }

    #[test]
    fn groups_by_any_args_key() {
        let trace = r#"{"traceEvents": [
            {"c\u0061t": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"graph node id": 9, "correlation": 3, "stream": 60, "mod\u0075le": "m"}}
        ]}"#;
        let by_stream = read_text(trace, "stream");
        assert_eq!(by_stream.values.get(by_stream.kernels[0].value), "60");
        let by_module = read_text(trace, "module");
        assert_eq!(by_module.values.get(by_module.kernels[0].value), "m");
        let by_correlation = read_text(trace, "correlation");
        assert_eq!(by_correlation.values.get(by_correlation.kernels[0].value), "3");
        assert_eq!(by_correlation.kernels[0].replay, Some(3));
    }
}
