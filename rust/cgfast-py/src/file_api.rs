//! The file pipeline, annotation files and the command line, from Python.

use std::path::PathBuf;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cgfast_core::annotations::file as annotation_file;
use cgfast_core::annotations::Annotations;
use cgfast_core::cancel;
use cgfast_core::files::paths::{default_output, find_annotations};
use cgfast_core::passes::recover::Recover;
use cgfast_core::pipeline::{self, Options};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::convert::{annotations_of, graphs_to_py, json_to_py, value_to_py};
use crate::TraceError;

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

fn recover_mode(name: &str) -> PyResult<Recover> {
    match name {
        "auto" => Ok(Recover::Auto),
        "always" => Ok(Recover::Always),
        "never" => Ok(Recover::Never),
        other => {
            Err(PyValueError::new_err(format!("recover must be 'auto', 'always' or 'never', not {other:?}")))
        }
    }
}

/// Annotate the trace file `trace` (`.json` or `.json.gz`) into `output` (default:
/// `<trace>.annotated.json[.gz]`), as `cgfast annotate` does: annotate, move
/// overlapping kernels to `overlap_stream`, fix timestamp jitter up to `max_adjust_us`,
/// recover missing graph node ids (`recover`: "auto", "always" or "never";
/// `topology_only` ignores `cgfast.replay` stamps and equivalent replays, as before
/// they existed; `spans`: the dotted annotation key whose scopes get
/// `gpu_user_annotation` spans on the GPU lanes, None or "none" for none; `lanes`:
/// "all" moves graphed events to their annotated lanes and keeps the lane each ran on
/// as `args["original_stream"]`, "none" moves none and writes a named lane as
/// `args["annotated_stream"]`, "reference" moves as "all" without `original_stream`).
///
/// `annotations`: a path to an annotation file (JSON, optionally gzipped, or a
/// PyTorch pickle), a dict of node id -> list, or None to find
/// `kernel_annotations_rank<R>_*.json` as the CLI does. The output is written to a
/// temporary file and renamed into place, so a failed run leaves nothing behind; gzip
/// when its name ends in `.gz` (`gzip_level` 0..9). Returns the `--json` report as a
/// dict. Raises `TraceError` for a trace or annotation file that cannot be processed,
/// ValueError for bad options, and KeyboardInterrupt (after cleaning up) on Ctrl-C.
#[pyfunction]
#[pyo3(signature = (trace, annotations = None, output = None, *, default_stream = Options::DEFAULT_STREAM, overlap_stream = Options::OVERLAP_STREAM, max_adjust_us = Options::MAX_ADJUST_US, recover = "auto", gzip_level = Options::GZIP_LEVEL, topology_only = false, spans = Some(pipeline::DEFAULT_SPANS.to_string()), lanes = "all"))]
#[pyo3(
    text_signature = "(trace, annotations=None, output=None, *, default_stream=7, overlap_stream=8, max_adjust_us=1.0, recover='auto', gzip_level=3, topology_only=False, spans='module', lanes='all')"
)]
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
    spans: Option<String>,
    lanes: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let started = Instant::now();
    let trace = path_of(trace)?.ok_or_else(|| PyValueError::new_err("trace must be a path"))?;
    if !(max_adjust_us.is_finite() && max_adjust_us >= 0.0) || gzip_level > 9 {
        return Err(PyValueError::new_err("max_adjust_us must be >= 0 and gzip_level 0..9"));
    }
    if spans.as_deref() == Some("") {
        return Err(PyValueError::new_err("spans must be an annotation key, or None for no spans"));
    }
    let lanes = pipeline::Lanes::parse(lanes).ok_or_else(|| {
        PyValueError::new_err(format!("lanes must be 'all', 'none' or 'reference', not {lanes:?}"))
    })?;
    let (annotations_path, annotations): (Option<PathBuf>, Annotations) = match annotations {
        Some(a) if !a.is_none() && a.cast::<PyString>().is_err() && a.hasattr("items")? => {
            (None, annotations_of(a, None)?)
        }
        Some(a) if !a.is_none() => {
            let path = path_of(a)?.expect("not None");
            let loaded = py.detach(|| annotation_file::read(&path)).map_err(TraceError::new_err)?;
            (Some(path), loaded)
        }
        _ => {
            let path = find_annotations(&trace, "pass annotations=").map_err(TraceError::new_err)?;
            let loaded = py.detach(|| annotation_file::read(&path)).map_err(TraceError::new_err)?;
            (Some(path), loaded)
        }
    };
    let output = match output {
        Some(o) => path_of(o)?,
        None => None,
    }
    .unwrap_or_else(|| default_output(&trace));
    let options = Options {
        default_stream,
        overlap_stream,
        max_adjust_us,
        recover: recover_mode(recover)?,
        gzip_level,
        topology_only,
        spans: spans.filter(|key| key != "none"),
        lanes,
    };
    let (result, raised) = interruptible(py, || {
        pipeline::annotate_file(&trace, &annotations, &output, &options, &mut |_, _, _| {})
    })?;
    if let Some(e) = raised {
        return Err(e);
    }
    let mut report = result.map_err(|f| TraceError::new_err(f.message))?;
    report.seconds = started.elapsed().as_secs_f64();
    json_to_py(py, &report.to_json(annotations_path.as_deref(), true))
}

/// `(annotations, graphs, stacks)` of an annotation file (cgfast JSON, optionally
/// gzipped, or a PyTorch pickle, read without executing code): node id -> list of
/// dicts/strings, exec graph id -> its recorded nodes, and node id -> its launch
/// frames (`file:line:function`, innermost first; empty without a stacks section). Raises `TraceError` for a file that is
/// neither.
#[pyfunction]
pub fn read_annotations<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let path = path_of(path)?.ok_or_else(|| PyValueError::new_err("path must not be None"))?;
    let loaded = py.detach(|| annotation_file::read(&path)).map_err(TraceError::new_err)?;
    let nodes = PyDict::new(py);
    let mut ids: Vec<&cgfast_core::index::NodeId> = loaded.nodes.keys().collect();
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
/// (exec graph id -> recorded nodes) and `stacks` (node id -> launch frames) as a cgfast annotation file at `path`,
/// atomically; gzipped when the name ends in `.gz`. Raises TypeError for data of the
/// wrong shape and `TraceError` when the file cannot be written.
#[pyfunction]
#[pyo3(signature = (path, annotations, graphs = None, stacks = None))]
pub fn write_annotations(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    annotations: &Bound<'_, PyAny>,
    graphs: Option<&Bound<'_, PyAny>>,
    stacks: Option<std::collections::HashMap<cgfast_core::index::NodeId, Vec<String>>>,
) -> PyResult<()> {
    let path = path_of(path)?.ok_or_else(|| PyValueError::new_err("path must not be None"))?;
    let mut annotations = annotations_of(annotations, graphs)?;
    annotations.stacks = stacks.unwrap_or_default().into_iter().collect();
    py.detach(|| annotation_file::write(&path, &annotations)).map_err(TraceError::new_err)
}

/// Run the `cgfast` command line in this process; returns its exit status (130 when
/// a signal stopped it: the command line has said so on stderr).
#[pyfunction]
pub fn run_cli(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    py.import("sys")?.getattr("stdout")?.call_method0("flush")?;
    cgfast_cli::quiet_panics();
    // a signal stops the command line, which says so and exits 130; or it had finished
    let (status, _signalled) = interruptible(py, || cgfast_cli::run(argv))?;
    Ok(status)
}

/// Run `work` on a thread of its own while this one waits in short steps, without
/// the GIL, letting Python run its signal handlers in between. When one raises (Ctrl-C:
/// KeyboardInterrupt) the work is asked to stop, and the exception is given once it
/// has stopped (its temporary files removed), beside the work's result.
fn interruptible<T: Send>(py: Python<'_>, work: impl FnOnce() -> T + Send) -> PyResult<(T, Option<PyErr>)> {
    cancel::clear();
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
                    cancel::request();
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
