//! `cgfast.diff` from Python: the work is the core's ([`diff_files`]).

use cgfast_core::{check_chart, diff_files, find_traces, write_diff_chart, DiffOptions, Silent, Wanted};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::convert::json_to_py;
use crate::file_api::{interruptible, path_of, py_error, token_of, PyCancelToken};
use crate::summary_api::paths_of;

fn percentage(name: &str, value: f64) -> PyResult<f64> {
    if value.is_finite() && value >= 0.0 {
        Ok(value / 100.0)
    } else {
        Err(PyValueError::new_err(format!("{name} must be a percentage of 0 or more, not {value}")))
    }
}

/// The diff of the annotated traces `test` against `base` as a dict: what `cgfast diff
/// --format json` prints. Each side: a path or an iterable of paths (traces,
/// directories searched for `*.annotated.json[.gz]`, glob patterns). Percentages
/// (`threshold`, `min_change`, `fail_if_slower`, `min_share`) are in percent, as on the
/// command line.
/// Raises `TraceError` for a trace that cannot be read, a side without graphed replays
/// or a key one side carries and the other does not. Every option is given
/// (`cgfast.diff` fills in the core's defaults); the run stops when `cancel` (or Ctrl-C
/// on the main thread) asks.
#[pyfunction]
#[pyo3(signature = (base, test, *, by, depth, group_layers, hierarchy, threshold, min_change, per_rank, fail_if_slower, min_share, pool_runs, jobs, chart, cancel))]
#[allow(clippy::too_many_arguments)]
pub fn diff_report<'py>(
    py: Python<'py>,
    base: &Bound<'py, PyAny>,
    test: &Bound<'py, PyAny>,
    by: Option<&str>,
    depth: Option<usize>,
    group_layers: bool,
    hierarchy: Option<bool>,
    threshold: f64,
    min_change: f64,
    per_rank: bool,
    fail_if_slower: Option<f64>,
    min_share: f64,
    pool_runs: bool,
    jobs: usize,
    chart: Option<&Bound<'py, PyAny>>,
    cancel: Option<&Bound<'py, PyCancelToken>>,
) -> PyResult<Bound<'py, PyAny>> {
    if by == Some("") {
        return Err(PyValueError::new_err(
            "by must be a key of args, such as 'module' or 'name', or 'kernel'",
        ));
    }
    if depth == Some(0) {
        return Err(PyValueError::new_err("depth must be at least 1 (or None: whole paths)"));
    }
    let options = DiffOptions {
        by: by.map(str::to_string),
        depth,
        group_layers,
        tree: hierarchy,
        threshold: percentage("threshold", threshold)?,
        min_change: percentage("min_change", min_change)?,
        per_rank,
        fail_if_slower: fail_if_slower.map(|p| percentage("fail_if_slower", p)).transpose()?,
        min_share: percentage("min_share", min_share)?,
        pool_runs,
    };
    let chart = match chart {
        Some(c) => path_of(c)?,
        None => None,
    };
    if let Some(path) = &chart {
        check_chart(path).map_err(|e| PyValueError::new_err(e.to_string()))?;
    }
    let (base, test) = (paths_of(base)?, paths_of(test)?);
    let cancel = token_of(cancel);
    let (report, raised) =
        interruptible(py, &cancel, || -> Result<serde_json::Value, cgfast_core::Error> {
            let base = find_traces(&base, Wanted::Annotated)?;
            let test = find_traces(&test, Wanted::Annotated)?;
            let diff = diff_files(&base, &test, &options, jobs, &Silent, &cancel)?;
            if let Some(path) = &chart {
                write_diff_chart(path, &diff)?;
            }
            Ok(diff.to_json())
        })?;
    if let Some(e) = raised {
        return Err(e);
    }
    json_to_py(py, &report.map_err(py_error)?)
}
