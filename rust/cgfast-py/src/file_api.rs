//! The file pipeline, annotation files and the command line, from Python; and how a
//! run is stopped: its own token, cancelled by Ctrl-C on the main thread or by the
//! caller from anywhere.

use std::path::PathBuf;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cgfast_core::{
    annotate_file as annotate, default_output, find_annotations, read_annotations as read, Annotations,
    CancelToken, Error, NodeId, Options, Spans,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::convert::{annotations_of, graphs_to_py, json_to_py, value_to_py};
use crate::{CancelledError, TraceError};

pub(crate) fn path_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<PathBuf>> {
    if obj.is_none() {
        return Ok(None);
    }
    let fspath = obj.py().import("os")?.getattr("fspath")?.call1((obj,))?;
    match fspath.cast::<PyString>() {
        Ok(s) => Ok(Some(PathBuf::from(s.to_string_lossy().into_owned()))),
        Err(_) => Err(PyValueError::new_err("paths must be str or os.PathLike[str]")),
    }
}

/// The core's error as the exception Python raises: `ValueError` for a bad option,
/// `cgfast.CancelledError` for a cancelled run, `cgfast.TraceError` for the rest.
pub(crate) fn py_error(e: Error) -> PyErr {
    match e {
        Error::BadOption { .. } => PyValueError::new_err(e.to_string()),
        Error::Cancelled => CancelledError::new_err("the run was cancelled through its CancelToken"),
        e => TraceError::new_err(e.to_string()),
    }
}

/// A request to stop the runs given this token (`cancel=`): call `cancel()` from any
/// thread and each such run stops at its next chunk of input or output, removes its
/// temporary output and raises `cgfast.CancelledError`. Ctrl-C stops the run on the
/// main thread by itself (with `KeyboardInterrupt`); a run on another thread, which
/// Python's signals never reach, is stopped through its token. A token stays cancelled.
#[pyclass(name = "CancelToken", module = "cgfast", frozen)]
#[derive(Default)]
pub struct PyCancelToken(CancelToken);

#[pymethods]
impl PyCancelToken {
    #[new]
    fn new() -> PyCancelToken {
        PyCancelToken::default()
    }

    /// Ask the runs given this token to stop.
    fn cancel(&self) {
        self.0.cancel();
    }

    /// Whether `cancel()` was called.
    #[getter]
    fn cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    fn __repr__(&self) -> String {
        format!("CancelToken(cancelled={})", if self.0.is_cancelled() { "True" } else { "False" })
    }
}

/// The token a run takes: the caller's, or one of its own.
pub(crate) fn token_of(cancel: Option<&Bound<'_, PyCancelToken>>) -> CancelToken {
    cancel.map_or_else(CancelToken::new, |token| token.get().0.clone())
}

/// Annotate the trace file `trace` into `output`, as `cgfast.annotate_file` does (the
/// options documented there, every one given: `cgfast.annotate_file` fills in the
/// core's defaults); the run stops when `cancel` (or Ctrl-C on the main thread) asks.
/// Returns the `--json` report as a dict.
#[pyfunction]
#[pyo3(signature = (trace, annotations, output, *, default_stream, overlap_stream, max_adjust_us, recover, gzip_level, topology_only, spans, lanes, cancel))]
#[allow(clippy::too_many_arguments)]
pub fn annotate_file<'py>(
    py: Python<'py>,
    trace: &Bound<'py, PyAny>,
    annotations: Option<&Bound<'py, PyAny>>,
    output: Option<&Bound<'py, PyAny>>,
    default_stream: i64,
    overlap_stream: i64,
    max_adjust_us: f64,
    recover: &str,
    gzip_level: u32,
    topology_only: bool,
    spans: Option<&str>,
    lanes: &str,
    cancel: Option<&Bound<'py, PyCancelToken>>,
) -> PyResult<Bound<'py, PyAny>> {
    let started = Instant::now();
    let trace = path_of(trace)?.ok_or_else(|| PyValueError::new_err("trace must be a path"))?;
    let mut options = Options::default();
    options.default_stream = default_stream;
    options.overlap_stream = overlap_stream;
    options.max_adjust_us = max_adjust_us;
    options.recover = recover.parse().map_err(py_error)?;
    options.gzip_level = gzip_level;
    options.topology_only = topology_only;
    options.spans = match spans {
        None => Spans::Off,
        Some(key) => key.parse().map_err(py_error)?,
    };
    options.lanes = lanes.parse().map_err(py_error)?;
    options.check().map_err(py_error)?;
    let options = options.with_environment();
    let annotations: Annotations = match annotations {
        Some(a) if !a.is_none() && a.cast::<PyString>().is_err() && a.hasattr("items")? => {
            annotations_of(a, None)?
        }
        Some(a) if !a.is_none() => {
            let path = path_of(a)?.expect("not None");
            py.detach(|| read(&path)).map_err(py_error)?
        }
        _ => {
            let path = find_annotations(&trace, "pass annotations=").map_err(py_error)?;
            py.detach(|| read(&path)).map_err(py_error)?
        }
    };
    let output = match output {
        Some(o) => path_of(o)?,
        None => None,
    }
    .unwrap_or_else(|| default_output(&trace));
    let cancel = token_of(cancel);
    let (result, raised) = interruptible(py, &cancel, || {
        annotate(&trace, &annotations, &output, &options, &cancel, &mut |_, _, _| {})
    })?;
    if let Some(e) = raised {
        return Err(e);
    }
    let mut report = result.map_err(py_error)?;
    report.seconds = started.elapsed().as_secs_f64();
    json_to_py(py, &report.to_json(true))
}

/// `(annotations, graphs, stacks)` of an annotation file (cgfast JSON, optionally
/// gzipped, or a PyTorch pickle, read without executing code): node id -> list of
/// dicts/strings, exec graph id -> its recorded nodes, and node id -> its launch
/// frames (`file:line:function`, innermost first; empty without a stacks section).
/// Raises `TraceError` for a file that is neither.
#[pyfunction]
pub fn read_annotations<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let path = path_of(path)?.ok_or_else(|| PyValueError::new_err("path must not be None"))?;
    let loaded = py.detach(|| read(&path)).map_err(py_error)?;
    let nodes = PyDict::new(py);
    let mut ids: Vec<&NodeId> = loaded.nodes.keys().collect();
    ids.sort_unstable();
    for id in ids {
        let items: Vec<Bound<'py, PyAny>> =
            loaded.nodes[id].iter().map(|item| value_to_py(py, &item.to_value())).collect::<PyResult<_>>()?;
        nodes.set_item(*id, items)?;
    }
    let stacks = PyDict::new(py);
    for (id, frames) in &loaded.stacks {
        stacks.set_item(*id, frames)?;
    }
    Ok((nodes, graphs_to_py(py, &loaded.graphs)?, stacks))
}

/// Write `annotations` (node id -> list of dicts/strings) and, optionally, `graphs`
/// (exec graph id -> recorded nodes), `stacks` (node id -> launch frames),
/// `launch_phases` (node id -> `"backward"` where its frames are its forward op's) and `traces`
/// (the absolute paths of the traces the recording process exported) as a cgfast
/// annotation file at `path`, atomically; gzipped when the name ends in `.gz`. Raises
/// TypeError for data of the wrong shape and `TraceError` when the file cannot be written.
#[pyfunction]
#[pyo3(signature = (path, annotations, graphs = None, stacks = None, traces = None, launch_phases = None))]
pub fn write_annotations(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    annotations: &Bound<'_, PyAny>,
    graphs: Option<&Bound<'_, PyAny>>,
    stacks: Option<std::collections::HashMap<NodeId, Vec<String>>>,
    traces: Option<Vec<PathBuf>>,
    launch_phases: Option<std::collections::HashMap<NodeId, String>>,
) -> PyResult<()> {
    let path = path_of(path)?.ok_or_else(|| PyValueError::new_err("path must not be None"))?;
    let mut annotations = annotations_of(annotations, graphs)?;
    annotations.stacks = stacks.unwrap_or_default().into_iter().collect();
    annotations.traces = traces.unwrap_or_default();
    annotations.launch_phases = launch_phases.unwrap_or_default().into_iter().collect();
    py.detach(|| cgfast_core::write_annotations(&path, &annotations)).map_err(py_error)
}

/// Run the `cgfast` command line in this process; returns its exit status (130 when
/// a signal stopped it: the command line has said so on stderr).
#[pyfunction]
pub fn run_cli(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    py.import("sys")?.getattr("stdout")?.call_method0("flush")?;
    cgfast_cli::quiet_panics();
    // a signal stops the command line, which says so and exits 130; or it had finished
    let cancel = CancelToken::new();
    let (status, _signalled) = interruptible(py, &cancel, || cgfast_cli::run(argv, &cancel))?;
    Ok(status)
}

/// Run `work` on a thread of its own while this one waits in short steps, without
/// the GIL, letting Python run its signal handlers in between (on the main thread: on
/// others, Python runs none). When one raises (Ctrl-C: KeyboardInterrupt) the work's
/// own token, `cancel`, is cancelled, and the exception is given once the work has
/// stopped (its temporary files removed), beside the work's result.
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    cancel: &CancelToken,
    work: impl FnOnce() -> T + Send,
) -> PyResult<(T, Option<PyErr>)> {
    let finished = &(Mutex::new(false), Condvar::new());
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            let result = work();
            *finished.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
            finished.1.notify_one();
            result
        });
        let mut raised = None;
        let wait = || {
            let done = finished.0.lock().unwrap_or_else(PoisonError::into_inner);
            let (done, _) = finished
                .1
                .wait_timeout_while(done, Duration::from_millis(20), |done| !*done)
                .unwrap_or_else(PoisonError::into_inner);
            *done
        };
        // (a panicking work never says it finished: joining reports it)
        while !py.detach(wait) && !worker.is_finished() {
            if raised.is_none() {
                if let Err(e) = py.check_signals() {
                    cancel.cancel();
                    raised = Some(e);
                }
            }
        }
        let result = worker
            .join()
            .map_err(|_| PyRuntimeError::new_err("cgfast: internal error (a bug: please report it)"))?;
        Ok((result, raised))
    })
}
