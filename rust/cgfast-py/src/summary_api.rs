//! `cgfast.summarize` and trace discovery, from Python: the work is the core's.

use std::path::PathBuf;

use cgfast_core::{
    find_traces as find, summarize_files, write_chart, DefaultKey, Hierarchy, PeakOverride, Silent,
    SummaryOptions, Wanted, MODULE_KEY,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::convert::json_to_py;
use crate::file_api::{interruptible, path_of, py_error, PyCancelToken};
use crate::TraceError;

/// One path, or an iterable of them.
pub(crate) fn paths_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    if let Some(one) = path_of(obj).ok().flatten() {
        return Ok(vec![one]);
    }
    let mut paths = Vec::new();
    for item in
        obj.try_iter().map_err(|_| PyValueError::new_err("paths must be a path or an iterable of paths"))?
    {
        paths.push(path_of(&item?)?.ok_or_else(|| PyValueError::new_err("paths must not contain None"))?);
    }
    if paths.is_empty() {
        return Err(PyValueError::new_err("no paths given"));
    }
    Ok(paths)
}

/// The files `paths` name: files as given, directories searched (for traces, or for
/// `cgfast annotate`'s outputs with `annotated=True`), glob patterns expanded.
#[pyfunction]
#[pyo3(signature = (paths, *, annotated = false))]
pub fn find_traces<'py>(
    py: Python<'py>,
    paths: &Bound<'py, PyAny>,
    annotated: bool,
) -> PyResult<Bound<'py, PyList>> {
    let paths = paths_of(paths)?;
    let wanted = if annotated { Wanted::Annotated } else { Wanted::Traces };
    let found = py.detach(|| find(&paths, wanted)).map_err(py_error)?;
    PyList::new(py, found.iter().map(|p| p.display().to_string()))
}

/// The summary report of annotated traces as a dict (what `cgfast summary --format
/// json` prints), plus `replay_rows` with `steps`, as `cgfast.summary_report` says
/// (every option given: it fills in the core's defaults; `by` None: `module` where the
/// traces carry it, else `name`, else `kernel`); the run stops when `cancel` (or Ctrl-C
/// on the main thread) asks. Raises `TraceError` naming every trace that cannot be read.
#[pyfunction]
#[pyo3(signature = (paths, *, by, steps, top, jobs, chart, depth, group_layers, hierarchy, cancel, efficiency=false, peak_tflops=None, peak_gbps=None))]
#[allow(clippy::too_many_arguments)]
pub fn summary_report<'py>(
    py: Python<'py>,
    paths: &Bound<'py, PyAny>,
    by: Option<&str>,
    steps: bool,
    top: usize,
    jobs: usize,
    chart: Option<&Bound<'py, PyAny>>,
    depth: Option<usize>,
    group_layers: bool,
    hierarchy: Option<bool>,
    cancel: Option<&Bound<'py, PyCancelToken>>,
    efficiency: bool,
    peak_tflops: Option<f64>,
    peak_gbps: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    if (peak_tflops.is_some() || peak_gbps.is_some()) && !efficiency {
        return Err(PyValueError::new_err("peak_tflops and peak_gbps are for efficiency=True"));
    }
    if [peak_tflops, peak_gbps].into_iter().flatten().any(|p| !(p.is_finite() && p > 0.0)) {
        return Err(PyValueError::new_err("peak_tflops and peak_gbps must be numbers above 0"));
    }
    if by == Some("") {
        return Err(PyValueError::new_err("by must be a key of args, such as 'name' or 'module'"));
    }
    if depth == Some(0) {
        return Err(PyValueError::new_err("depth must be at least 1 (or None: whole paths)"));
    }
    if hierarchy == Some(true) && chart.is_none() {
        return Err(PyValueError::new_err(
            "hierarchy draws the hierarchy in a chart: give chart='out.html' (or .svg)",
        ));
    }
    let default_key = by.is_none().then_some(DefaultKey { tree: hierarchy });
    let by = by.unwrap_or(MODULE_KEY);
    let hierarchy = Hierarchy::new(by, depth, group_layers, hierarchy);
    let paths = paths_of(paths)?;
    let chart = match chart {
        Some(c) => path_of(c)?,
        None => None,
    };
    let options = SummaryOptions { by: by.to_string(), steps, top, hierarchy, default_key };
    let cancel = crate::file_api::token_of(cancel);
    let (report, raised) = interruptible(py, &cancel, || {
        let traces = find(&paths, Wanted::Annotated).map_err(py_error)?;
        let (summary, failures) = summarize_files(&traces, &options, jobs, &Silent, &cancel);
        if cancel.is_cancelled() {
            return Err(py_error(cgfast_core::Error::Cancelled));
        }
        if !failures.is_empty() {
            let lines: Vec<String> = failures.iter().map(ToString::to_string).collect();
            return Err(TraceError::new_err(lines.join("\n")));
        }
        let rows = summary.rows(top);
        let efficiency =
            efficiency.then(|| summary.efficiency(PeakOverride { tflops: peak_tflops, gbps: peak_gbps }));
        if let Some(path) = &chart {
            write_chart(path, &summary, &rows, efficiency.as_ref()).map_err(py_error)?;
        }
        let mut report = summary.to_json(top);
        if steps {
            report["replay_rows"] = serde_json::Value::Array(summary.replay_rows());
        }
        if let Some(e) = &efficiency {
            report["efficiency"] = e.to_json();
        }
        Ok(report)
    })?;
    if let Some(e) = raised {
        return Err(e);
    }
    json_to_py(py, &report?)
}
