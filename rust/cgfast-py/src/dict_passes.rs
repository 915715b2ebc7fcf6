//! The three passes on a trace held as Python dicts: the dicts' fields handed to the
//! core's `reference` passes, the decisions written back exactly as the reference would.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use cgfast_core::reference::{self, Args, Event, Refusal, Refused, Scalar, Trace};
use cgfast_core::NodeId;
use pyo3::exceptions::{PyAttributeError, PyKeyError, PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

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

/// A Python value as the passes compare it.
fn scalar(value: &Bound<'_, PyAny>) -> PyResult<Scalar<'static>> {
    Ok(if value.is_none() {
        Scalar::None
    } else if value.is_instance_of::<PyBool>() {
        Scalar::Bool(value.extract()?)
    } else if value.is_instance_of::<PyInt>() {
        match value.extract::<i64>() {
            Ok(i) => Scalar::Int(i),
            Err(_) => Scalar::BigInt(Cow::Owned(value.str()?.to_string())),
        }
    } else if value.is_instance_of::<PyFloat>() {
        Scalar::Float(value.extract()?)
    } else if let Ok(s) = value.cast::<PyString>() {
        Scalar::Str(Cow::Owned(s.to_string_lossy().into_owned()))
    } else {
        Scalar::Other
    })
}

/// A value the passes decided on, as Python's.
fn scalar_to_py<'py>(py: Python<'py>, value: &Scalar<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Scalar::None | Scalar::Other => py.None().into_bound(py),
        Scalar::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Scalar::Int(i) => i.into_pyobject(py)?.into_any(),
        Scalar::BigInt(digits) => py.get_type::<PyInt>().call1((digits.as_ref(),))?,
        Scalar::Float(f) => f.into_pyobject(py)?.into_any(),
        Scalar::Str(s) => PyString::new(py, s).into_any(),
    })
}

/// An int the core can not hold (beyond 64 bits).
fn is_big_int(value: Option<&Bound<'_, PyAny>>) -> bool {
    value.is_some_and(|v| {
        v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() && v.extract::<i64>().is_err()
    })
}

/// The events of `traceEvents` (the caller has checked that they are dicts) as the
/// passes read them.
fn trace_of(events: &Bound<'_, PyList>) -> PyResult<Trace> {
    let mut trace = Trace::new();
    for ev in events.iter() {
        let Ok(d) = ev.cast::<PyDict>() else {
            trace.push(None);
            continue;
        };
        let fields = ["pid", "tid", "ts", "dur"].map(|name| d.get_item(name));
        let [pid, tid, ts, dur] = fields;
        let (pid, tid, ts, dur) = (pid?, tid?, ts?, dur?);
        let (ph, cat, name) = (str_field(d, "ph")?, str_field(d, "cat")?, str_field(d, "name")?);
        let args = d.get_item("args")?;
        let (node, stream, name_is_stream) = match args.as_ref().map(|a| a.cast::<PyDict>()) {
            Some(Ok(a)) => {
                let name_is_stream = match a.get_item("name")? {
                    Some(n) => n.str()?.to_string_lossy().starts_with("stream "),
                    None => false,
                };
                (a.get_item("graph node id")?, a.get_item("stream")?, Some(name_is_stream))
            }
            _ => (None, None, None),
        };
        let optional = |v: &Option<Bound<'_, PyAny>>| v.as_ref().map(|v| scalar(v)).transpose();
        let event = Event {
            ph: ph.as_deref(),
            cat: cat.as_deref(),
            name: name.as_deref(),
            pid: optional(&pid)?,
            tid: tid.as_ref().map(|t| scalar(t)).transpose()?.unwrap_or(Scalar::None),
            ts: optional(&ts)?,
            dur: optional(&dur)?,
            args: match (&args, name_is_stream) {
                (None, _) => Args::Missing,
                (Some(_), None) => Args::NotADict,
                (Some(_), Some(name_is_stream)) => {
                    Args::Dict { node: optional(&node)?, stream: optional(&stream)?, name_is_stream }
                }
            },
        };
        trace.push(Some(&event));
    }
    Ok(trace)
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
fn refusal_error(events: &Bound<'_, PyList>, refused: Refused) -> PyResult<PyErr> {
    let ordinal = refused.ordinal;
    let event = events.get_item(ordinal as usize)?;
    let field = if refused.why == Refusal::DurNotANumber { "dur" } else { "ts" };
    if refused.why == Refusal::NoTs {
        return Ok(PyKeyError::new_err(format!("traceEvents[{ordinal}] has no \"ts\"")));
    }
    let value = event.get_item(field)?;
    if is_big_int(Some(&value)) {
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

/// The annotations of the nodes the events carry, resolved as the reference does.
fn resolve<'py>(
    py: Python<'py>,
    trace: &Trace,
    annotations: &Bound<'py, PyAny>,
) -> PyResult<HashMap<NodeId, PyResolved<'py>>> {
    let mut out = HashMap::new();
    let annotation_key = PyString::new(py, "annotation").into_any();
    for node in trace.nodes() {
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
                        resolved.stream = Some(py.get_type::<PyInt>().call1((s,))?.extract()?);
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
pub fn annotate_trace(
    py: Python<'_>,
    trace: &Bound<'_, PyDict>,
    annotations: &Bound<'_, PyAny>,
    default_stream: i64,
) -> PyResult<u64> {
    let events = events_of(trace)?;
    check_dicts(&events, |_| Ok(true))?;
    check_keys(&events, |d| Ok((true, is_flow_finish(d)? || has_node(d)?)))?;
    let mut dicts = trace_of(&events)?;
    let resolved = resolve(py, &dicts, annotations)?;
    let outcome = dicts.annotate(|node| resolved.get(&node).map(|r| r.stream), default_stream);
    let event_at = |ordinal: u32| -> PyResult<Bound<'_, PyDict>> {
        Ok(events.get_item(ordinal as usize)?.cast_into::<PyDict>()?)
    };

    for relaned in dicts.relaned() {
        let event = event_at(relaned.ordinal)?;
        if let Some(args) = args_of(&event)? {
            if let Some(r) = relaned.annotation.and_then(|n| resolved.get(&n)) {
                for (k, v) in &r.writes {
                    args.set_item(k, v)?;
                }
            }
            args.set_item("stream", relaned.stream)?;
        }
        event.set_item("tid", relaned.stream)?;
    }
    for (ordinal, tid) in dicts.flows_moved() {
        event_at(ordinal)?.set_item("tid", scalar_to_py(py, &tid)?)?;
    }

    let removed: HashSet<u32> = dicts.removed().collect();
    let gpu_pid = match outcome.gpu_pid_from {
        Some(ordinal) => event_at(ordinal)?.get_item("pid")?,
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
    for lane in &outcome.named_lanes {
        let tid = scalar_to_py(py, lane)?;
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
    let mut dicts = trace_of(&events)?;
    let moved = match dicts.move_overlapping_to_stream(default_stream, overlap_stream) {
        Ok(moved) => moved,
        Err(refused) => return Err(refusal_error(&events, refused)?),
    };
    for relaned in dicts.relaned() {
        let event = events.get_item(relaned.ordinal as usize)?.cast_into::<PyDict>()?;
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
pub fn fix_overlapping_timestamps(
    py: Python<'_>,
    trace: &Bound<'_, PyDict>,
    max_adjust_us: f64,
) -> PyResult<u64> {
    let events = events_of(trace)?;
    let is_work = |d: &Bound<'_, PyDict>| -> PyResult<bool> {
        Ok(str_field(d, "cat")?.is_some_and(|c| reference::is_work(&c)))
    };
    check_dicts(&events, is_work)?;
    check_keys(&events, |d| Ok((is_work(d)? && graphed(d)?, false)))?;
    let mut dicts = trace_of(&events)?;
    let fixed = match dicts.fix_overlapping_timestamps(max_adjust_us) {
        Ok(fixed) => fixed,
        Err(refused) => return Err(refusal_error(&events, refused)?),
    };
    for (ordinal, ts) in dicts.retimed() {
        events.get_item(ordinal as usize)?.set_item("ts", scalar_to_py(py, &ts)?)?;
    }
    for large in &fixed.large {
        let event = events.get_item(large.ordinal as usize)?;
        let name = match event.cast::<PyDict>()?.get_item("name")? {
            Some(n) => n.get_item(pyo3::types::PySlice::new(py, 0, 60, 1))?.str()?.to_string(),
            None => "?".into(),
        };
        print(
            py,
            format!(
                "WARNING: large overlap {:.3}us on stream {} for {}, skipping adjustment",
                large.overlap_us,
                scalar_to_py(py, &large.lane)?.str()?,
                name
            ),
        )?;
    }
    Ok(fixed.fixed)
}
