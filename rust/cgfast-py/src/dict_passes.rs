//! The three passes on a trace held as Python dicts: index the dicts, decide in the
//! core, write the decisions back exactly as the reference would.

use std::collections::HashMap;

use cgfast_core::index::keys::Spelling;
use cgfast_core::index::{Cat, Field, Node, NodeId, Observed, Ph, TraceIndex, NONE};
use cgfast_core::passes::{self, AsksLane, FlowLink, OddEvents, Refusal, Refused};
use cgfast_core::pipeline::Options;
use pyo3::exceptions::{PyAttributeError, PyKeyError, PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use std::collections::HashSet;

use crate::convert::{key_of, key_to_py, num_of, num_to_py, spelled_key_to_py};

fn events_of<'py>(trace: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
    let events = trace.get_item("traceEvents")?.ok_or_else(|| PyKeyError::new_err("traceEvents"))?;
    events.cast_into::<PyList>().map_err(|_| PyTypeError::new_err("traceEvents must be a list"))
}

fn str_field(d: &Bound<'_, PyDict>, name: &str) -> PyResult<Option<String>> {
    Ok(match d.get_item(name)? {
        Some(v) => v.cast::<PyString>().ok().map(|s| s.to_string_lossy().into_owned()),
        None => None,
    })
}

fn num_field(value: Option<&Bound<'_, PyAny>>) -> Field<cgfast_core::index::keys::Num> {
    match value {
        None => Field::Missing,
        Some(v) => num_of(v).map_or(Field::Odd, Field::Value),
    }
}

/// An int the core can not hold (beyond 64 bits).
fn is_big_int(value: Option<&Bound<'_, PyAny>>) -> bool {
    value.is_some_and(|v| v.is_instance_of::<pyo3::types::PyInt>() && num_of(v).is_none())
}

fn spelling_of(v: Option<&Bound<'_, PyAny>>) -> Spelling {
    match v {
        Some(v) if v.is_instance_of::<pyo3::types::PyBool>() => Spelling::Bool,
        Some(v) if v.is_instance_of::<pyo3::types::PyFloat>() => Spelling::Float,
        _ => Spelling::Plain,
    }
}

fn node_of(v: Option<Bound<'_, PyAny>>) -> Node {
    let Some(v) = v else { return Node::Missing };
    if v.is_none() {
        return Node::Null;
    }
    match num_of(&v) {
        Some(n) => Node::of_num(n),
        // An int beyond 64 bits (or a float that is one).
        None => match v.extract::<NodeId>() {
            Ok(i) if !v.is_instance_of::<pyo3::types::PyFloat>() => Node::Id(i),
            _ => Node::Other,
        },
    }
}

/// The index of a trace of dicts, and which events have a `ts` or `dur` beyond 64 bits.
struct DictIndex {
    index: TraceIndex,
    big_ints: HashSet<u32>,
}

/// Index the events of `traceEvents` (the caller has checked that they are dicts).
fn index_of(events: &Bound<'_, PyList>) -> PyResult<DictIndex> {
    let mut index = TraceIndex::default();
    let mut big_ints = HashSet::new();
    for (ordinal, ev) in events.iter().enumerate() {
        let Ok(d) = ev.cast::<PyDict>() else {
            index.event_count += 1;
            continue;
        };
        let args = d.get_item("args")?;
        let args_dict = args.as_ref().and_then(|a| a.cast::<PyDict>().ok());
        let name = str_field(d, "name")?;
        let cat = str_field(d, "cat")?.map_or(Cat::Other, |c| Cat::from_name(&c));
        let ph = str_field(d, "ph")?.map_or(Ph::Other, |p| Ph::from_name(&p));
        let pid = match d.get_item("pid")? {
            Some(p) => Some(key_of(Some(&p), &mut index.keys)),
            None => None,
        };
        let tid_value = d.get_item("tid")?;
        let tid = key_of(tid_value.as_ref(), &mut index.keys);
        let pid_value = d.get_item("pid")?;
        let (node, args_stream, args_name_is_stream) = match args_dict {
            Some(a) => {
                let stream = a.get_item("stream")?.map(|s| key_of(Some(&s), &mut index.keys));
                let stream_name = match a.get_item("name")? {
                    Some(n) => n.str()?.to_string_lossy().starts_with("stream "),
                    None => false,
                };
                (node_of(a.get_item("graph node id")?), stream, stream_name)
            }
            None => (Node::Missing, None, false),
        };
        let (ts, dur) = (d.get_item("ts")?, d.get_item("dur")?);
        if is_big_int(ts.as_ref()) || is_big_int(dur.as_ref()) {
            big_ints.insert(ordinal as u32);
        }
        let observed = Observed {
            ph,
            cat,
            name: name.as_deref(),
            pid,
            tid,
            pid_spelling: spelling_of(pid_value.as_ref()),
            tid_spelling: spelling_of(tid_value.as_ref()),
            ts: num_field(ts.as_ref()),
            dur: num_field(dur.as_ref()),
            args: match (&args, args_dict) {
                (None, _) => Field::Missing,
                (Some(_), Some(_)) => Field::Value(()),
                (Some(_), None) => Field::Odd,
            },
            node,
            args_stream,
            args_name_is_stream,
            scope_span: false,
            moved_earlier: false,
            replay_marker: cgfast_core::index::ReplayMarker::None,
            correlation: None,
            grid_block: None,
        };
        let kept = index.observe(ordinal as u32, &observed);
        if observed.ts.value().is_none() {
            // the reference's flow index takes any `event.get("ts")` as it is
            let key = match &ts {
                // equal ints beyond 64 bits are one key: their digits, marked apart from
                // strings by a control character no trace writes
                Some(big) if is_big_int(Some(big)) => index.keys.string(&format!("\u{1}int {}", big.str()?)),
                _ => key_of(ts.as_ref(), &mut index.keys),
            };
            index.set_odd_ts_key(kept, key);
        }
    }
    Ok(DictIndex { index, big_ints })
}

/// The reference calls `event.get(...)` and `event.get("args", {}).get(...)`: an event
/// that is not a dict, or whose `args` is not one, fails there with AttributeError
/// (for `args`, only on the events that `reads_args` says it looks into).
fn check_dicts(
    events: &Bound<'_, PyList>,
    reads_args: impl Fn(&Bound<'_, PyDict>) -> PyResult<bool>,
) -> PyResult<()> {
    for (i, ev) in events.iter().enumerate() {
        let Ok(d) = ev.cast::<PyDict>() else {
            return Err(PyAttributeError::new_err(format!(
                "traceEvents[{i}] is {}, not a dict",
                ev.get_type().name()?
            )));
        };
        if let Some(args) = d.get_item("args")? {
            if !args.is_instance_of::<PyDict>() && reads_args(d)? {
                return Err(PyAttributeError::new_err(format!(
                    "traceEvents[{i}][\"args\"] is {}, not a dict",
                    args.get_type().name()?
                )));
            }
        }
    }
    Ok(())
}

/// Whether `event[field]` is there and can not be a dict key.
fn unhashable(event: &Bound<'_, PyDict>, field: &str) -> PyResult<bool> {
    Ok(event.get_item(field)?.is_some_and(|v| v.hash().is_err()))
}

/// `graph node id` present, not None and not 0, as the reference tests it.
fn has_node(event: &Bound<'_, PyDict>) -> PyResult<bool> {
    let Some(args) = args_of(event)? else { return Ok(false) };
    Ok(match args.get_item("graph node id")? {
        Some(node) => !node.is_none() && !node.eq(0)?,
        None => false,
    })
}

/// The reference keys sets and dicts by every event's `tid`, and by the `(tid, ts)` of
/// flow-finish and graphed events: a value that can not be a key fails with TypeError.
fn check_keys(
    events: &Bound<'_, PyList>,
    which: impl Fn(&Bound<'_, PyDict>) -> PyResult<(bool, bool)>,
) -> PyResult<()> {
    for (i, ev) in events.iter().enumerate() {
        let Ok(d) = ev.cast::<PyDict>() else { continue };
        let (tid_is_key, ts_is_key) = which(d)?;
        for (field, is_key) in [("tid", tid_is_key), ("ts", ts_is_key)] {
            if is_key && unhashable(d, field)? {
                return Err(PyTypeError::new_err(format!(
                    "traceEvents[{i}][\"{field}\"] can not be a dict key"
                )));
            }
        }
        if ts_is_key
            && args_of(d)?
                .map(|a| a.get_item("graph node id"))
                .transpose()?
                .flatten()
                .is_some_and(|n| n.hash().is_err())
        {
            return Err(PyTypeError::new_err(format!(
                "traceEvents[{i}][\"args\"][\"graph node id\"] can not be a dict key"
            )));
        }
    }
    Ok(())
}

/// `args.get("graph node id", 0) != 0`, as the lane passes test it.
fn graphed(event: &Bound<'_, PyDict>) -> PyResult<bool> {
    let Some(args) = args_of(event)? else { return Ok(false) };
    Ok(match args.get_item("graph node id")? {
        Some(node) => !node.eq(0)?,
        None => false,
    })
}

fn is_flow_finish(event: &Bound<'_, PyDict>) -> PyResult<bool> {
    Ok(str_field(event, "cat")?.as_deref() == Some("ac2g") && str_field(event, "ph")?.as_deref() == Some("f"))
}

/// The error the reference's Python raises where a lane pass refused the trace.
fn refusal_error(events: &Bound<'_, PyList>, dict_index: &DictIndex, refused: Refused) -> PyResult<PyErr> {
    let ordinal = dict_index.index.events[refused.event].ordinal;
    let event = events.get_item(ordinal as usize)?;
    let field = if refused.why == Refusal::DurNotANumber { "dur" } else { "ts" };
    if refused.why == Refusal::NoTs {
        return Ok(PyKeyError::new_err(format!("traceEvents[{ordinal}] has no \"ts\"")));
    }
    let value = event.get_item(field)?;
    if dict_index.big_ints.contains(&ordinal) && is_big_int(Some(&value)) {
        return Ok(PyOverflowError::new_err(format!(
            "traceEvents[{ordinal}][\"{field}\"] = {} is beyond 64 bits",
            value.repr()?
        )));
    }
    Ok(PyTypeError::new_err(format!(
        "traceEvents[{ordinal}][\"{field}\"] = {} is not a number",
        value.repr()?
    )))
}

/// A node's annotation with Python's own `str()` and `int()` applied.
struct PyResolved<'py> {
    writes: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    stream: Option<i64>,
}

impl AsksLane for PyResolved<'_> {
    fn lane(&self) -> Option<i64> {
        self.stream
    }
}

fn resolve<'py>(
    py: Python<'py>,
    index: &TraceIndex,
    annotations: &Bound<'py, PyAny>,
) -> PyResult<HashMap<NodeId, PyResolved<'py>>> {
    let mut out = HashMap::new();
    let annotation_key = PyString::new(py, "annotation").into_any();
    for e in &index.events {
        let Node::Id(node) = e.node() else { continue };
        if out.contains_key(&node) || !annotations.contains(node)? {
            continue;
        }
        let mut resolved = PyResolved { writes: Vec::new(), stream: None };
        for item in annotations.get_item(node)?.try_iter()? {
            let item = item?;
            match item.cast::<PyDict>() {
                Ok(d) => {
                    for (k, v) in d.iter() {
                        resolved.writes.push((k, v.str()?.into_any()));
                    }
                    if let Some(s) = d.get_item("stream")? {
                        resolved.stream = Some(py.get_type::<pyo3::types::PyInt>().call1((s,))?.extract()?);
                    }
                }
                Err(_) => resolved.writes.push((annotation_key.clone(), item.str()?.into_any())),
            }
        }
        out.insert(node, resolved);
    }
    Ok(out)
}

fn print(py: Python<'_>, line: String) -> PyResult<()> {
    py.import("builtins")?.getattr("print")?.call1((line,))?;
    Ok(())
}

fn args_of<'py>(event: &Bound<'py, PyDict>) -> PyResult<Option<Bound<'py, PyDict>>> {
    Ok(event.get_item("args")?.and_then(|a| a.cast_into::<PyDict>().ok()))
}

/// Annotate a trace held as a dict (`json.load` of a profiler trace), in place, as the
/// reference's `annotate_trace` does: every graphed event (`args["graph node id"]` in
/// `annotations`) gets its annotation's keys in `args` (`str()` of each value; a string
/// item goes to `args["annotation"]`) and moves to the lane its `"stream"` names (else
/// `default_stream`); `gpu_user_annotation` and flow events left on lanes without work
/// are removed (printing how many), and every work lane gets a `thread_name`.
///
/// `annotations`: node id -> list of dicts or strings (what `load_annotations`
/// returns). Returns the number of events annotated. Raises what the reference's
/// Python would (KeyError without `traceEvents`, AttributeError for events or `args`
/// that are not dicts), changing nothing then.
#[pyfunction]
#[pyo3(
    signature = (trace, annotations, default_stream = Options::DEFAULT_STREAM),
    text_signature = "(trace, annotations, default_stream=7)"
)]
pub fn annotate_trace(
    py: Python<'_>,
    trace: &Bound<'_, PyDict>,
    annotations: &Bound<'_, PyAny>,
    default_stream: i64,
) -> PyResult<u64> {
    let events = events_of(trace)?;
    check_dicts(&events, |_| Ok(true))?;
    check_keys(&events, |d| Ok((true, is_flow_finish(d)? || has_node(d)?)))?;
    let mut index = index_of(&events)?.index;
    let resolved = resolve(py, &index, annotations)?;
    let outcome = passes::annotate(&mut index, &resolved, default_stream, FlowLink::AtTidTs);
    let event_at = |ordinal: u32| -> PyResult<Bound<'_, PyDict>> {
        Ok(events.get_item(ordinal as usize)?.cast_into::<PyDict>()?)
    };

    for e in &index.events {
        let Some(stream) = e.new_stream(&index.keys) else { continue };
        let event = event_at(e.ordinal)?;
        if let Some(args) = args_of(&event)? {
            if let Some(r) = e.annotation().and_then(|n| resolved.get(&n)) {
                for (k, v) in &r.writes {
                    args.set_item(k, v)?;
                }
            }
            args.set_item("stream", stream)?;
        }
        event.set_item("tid", stream)?;
    }
    for f in index.flows.iter().filter(|f| f.new_tid != NONE) {
        event_at(f.ordinal)?.set_item("tid", key_to_py(py, index.keys.key(f.new_tid), &index.keys)?)?;
    }

    let mut removed: HashSet<u32> = index.events.iter().filter(|e| e.removed()).map(|e| e.ordinal).collect();
    removed.extend(index.flows.iter().filter(|f| f.removed()).map(|f| f.ordinal));
    let gpu_pid = match outcome.gpu_pid_event {
        Some(i) => event_at(index.events[i].ordinal)?.get_item("pid")?,
        None => None,
    };
    let gpu_pid = match gpu_pid {
        Some(p) => p,
        None => 0i64.into_pyobject(py)?.into_any(),
    };
    let kept = PyList::empty(py);
    for (i, ev) in events.iter().enumerate() {
        if !removed.contains(&(i as u32)) {
            kept.append(ev)?;
        }
    }
    for &(tid, spelling) in &outcome.named_lanes {
        let tid = spelled_key_to_py(py, index.keys.key(tid), spelling, &index.keys)?;
        let meta = PyDict::new(py);
        meta.set_item("ph", "M")?;
        meta.set_item("pid", &gpu_pid)?;
        meta.set_item("tid", &tid)?;
        meta.set_item("name", "thread_name")?;
        let args = PyDict::new(py);
        args.set_item("name", format!("stream {}", tid.str()?))?;
        meta.set_item("args", args)?;
        kept.append(meta)?;
    }
    trace.set_item("traceEvents", kept)?;
    if outcome.noise_removed > 0 {
        print(py, format!("Removed {} noise events from empty streams", outcome.noise_removed))?;
    }
    Ok(outcome.annotated)
}

/// Move graphed kernels of `default_stream` that start before the previous one ended
/// to `overlap_stream` (their `tid` and `args["stream"]`), in place, as the reference's
/// `_move_overlapping_to_stream` does. Returns the number moved.
///
/// Where the reference would fail (a graphed kernel without `ts`, a `ts` or `dur`
/// that is not a number, an unhashable `tid`) it raises the same exception type
/// (KeyError, TypeError, AttributeError; OverflowError beyond 64-bit integers) and
/// changes nothing.
#[pyfunction]
#[pyo3(
    signature = (trace, default_stream = Options::DEFAULT_STREAM, overlap_stream = Options::OVERLAP_STREAM),
    text_signature = "(trace, default_stream=7, overlap_stream=8)"
)]
pub fn move_overlapping_to_stream(
    trace: &Bound<'_, PyDict>,
    default_stream: i64,
    overlap_stream: i64,
) -> PyResult<u64> {
    let events = events_of(trace)?;
    check_dicts(&events, |d| {
        Ok(str_field(d, "cat")?.as_deref() == Some("kernel")
            && d.get_item("tid")?.is_some_and(|t| t.eq(default_stream).unwrap_or(false)))
    })?;
    let mut dict_index = index_of(&events)?;
    let moved = match passes::move_overlapping_or_refuse(
        &mut dict_index.index,
        default_stream,
        overlap_stream,
        OddEvents::Refuse,
    ) {
        Ok(moved) => moved,
        Err(refused) => return Err(refusal_error(&events, &dict_index, refused)?),
    };
    let index = dict_index.index;
    for e in index.events.iter().filter(|e| e.new_stream(&index.keys).is_some()) {
        let event = events.get_item(e.ordinal as usize)?.cast_into::<PyDict>()?;
        event.set_item("tid", overlap_stream)?;
        if let Some(args) = args_of(&event)? {
            args.set_item("stream", overlap_stream)?;
        }
    }
    Ok(moved)
}

/// On each lane, move a graphed work event that starts at most `max_adjust_us`
/// before the previous one ends to start at that end, in place, as the reference's
/// `_fix_overlapping_timestamps` does; larger overlaps are left alone and printed as
/// warnings. Returns the number of events moved.
///
/// Where the reference would fail (a graphed event without `ts`, a `ts` or `dur` that
/// is not a number) it raises the same exception type (KeyError, TypeError;
/// OverflowError beyond 64-bit integers) and changes nothing.
#[pyfunction]
#[pyo3(
    signature = (trace, max_adjust_us = Options::MAX_ADJUST_US),
    text_signature = "(trace, max_adjust_us=1.0)"
)]
pub fn fix_overlapping_timestamps(
    py: Python<'_>,
    trace: &Bound<'_, PyDict>,
    max_adjust_us: f64,
) -> PyResult<u64> {
    let events = events_of(trace)?;
    let is_work = |d: &Bound<'_, PyDict>| -> PyResult<bool> {
        Ok(str_field(d, "cat")?.is_some_and(|c| Cat::from_name(&c).is_work()))
    };
    check_dicts(&events, is_work)?;
    check_keys(&events, |d| Ok((is_work(d)? && graphed(d)?, false)))?;
    let mut dict_index = index_of(&events)?;
    let fixed =
        match passes::fix_timestamps_or_refuse(&mut dict_index.index, max_adjust_us, OddEvents::Refuse) {
            Ok(fixed) => fixed,
            Err(refused) => return Err(refusal_error(&events, &dict_index, refused)?),
        };
    let index = dict_index.index;
    for e in &index.events {
        if let Some(ts) = e.new_ts() {
            events.get_item(e.ordinal as usize)?.set_item("ts", num_to_py(py, ts)?)?;
        }
    }
    for large in &fixed.large {
        let e = &index.events[large.event];
        let event = events.get_item(e.ordinal as usize)?;
        let name = match event.cast::<PyDict>()?.get_item("name")? {
            Some(n) => n.get_item(pyo3::types::PySlice::new(py, 0, 60, 1))?.str()?.to_string(),
            None => "?".into(),
        };
        print(
            py,
            format!(
                "WARNING: large overlap {:.3}us on stream {} for {}, skipping adjustment",
                large.overlap_us,
                key_to_py(py, index.keys.key(large.tid), &index.keys)?.str()?,
                name
            ),
        )?;
    }
    Ok(fixed.fixed)
}
