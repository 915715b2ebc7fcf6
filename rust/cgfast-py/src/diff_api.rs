//! `cgfast.diff` from Python: the work is the core's ([`diff_files`]).

use cgfast_core::files::inputs::{self, Wanted};
use cgfast_core::files::many::Silent;
use cgfast_core::summary::diff::{diff_files, DiffOptions};
use cgfast_core::summary::diff_chart;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::convert::json_to_py;
use crate::file_api::path_of;
use crate::summary_api::paths_of;
use crate::TraceError;

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
/// (`threshold`, `fail_if_slower`, `min_share`) are in percent, as on the command line.
/// Raises `TraceError` for a trace that cannot be read, a side without graphed replays
/// or a key one side carries and the other does not.
#[pyfunction]
#[pyo3(signature = (base, test, *, by = None, depth = None, group_layers = false, hierarchy = None, threshold = 2.0, per_rank = false, fail_if_slower = None, min_share = 1.0, jobs = 0, chart = None))]
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
    per_rank: bool,
    fail_if_slower: Option<f64>,
    min_share: f64,
    jobs: usize,
    chart: Option<&Bound<'py, PyAny>>,
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
        per_rank,
        fail_if_slower: fail_if_slower.map(|p| percentage("fail_if_slower", p)).transpose()?,
        min_share: percentage("min_share", min_share)?,
    };
    let chart = match chart {
        Some(c) => path_of(c)?,
        None => None,
    };
    if let Some(path) = &chart {
        diff_chart::chart_kind(path).map_err(PyValueError::new_err)?;
    }
    let (base, test) = (paths_of(base)?, paths_of(test)?);
    let report = py.detach(|| -> Result<serde_json::Value, String> {
        let base = inputs::find(&base, Wanted::Annotated)?;
        let test = inputs::find(&test, Wanted::Annotated)?;
        let diff = diff_files(&base, &test, &options, jobs, &Silent)?;
        if let Some(path) = &chart {
            diff_chart::write(path, &diff)?;
        }
        Ok(diff.to_json())
    });
    json_to_py(py, &report.map_err(TraceError::new_err)?)
}
