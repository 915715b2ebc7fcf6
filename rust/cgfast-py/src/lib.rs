//! `cgfast._cgfast`: the Rust core, seen from Python.

mod convert;
mod dict_passes;
mod diff_api;
mod file_api;
mod graph_walk;
mod summary_api;

use cgfast_core::{DiffOptions, Options, SummaryOptions};
use pyo3::prelude::*;

pyo3::create_exception!(
    cgfast,
    TraceError,
    pyo3::exceptions::PyValueError,
    "A trace or annotation file cannot be processed."
);

pyo3::create_exception!(
    cgfast,
    CancelledError,
    pyo3::exceptions::PyException,
    "A run was cancelled through its CancelToken (its temporary output removed)."
);

#[pymodule]
fn _cgfast(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("TraceError", m.py().get_type::<TraceError>())?;
    m.add("CancelledError", m.py().get_type::<CancelledError>())?;
    m.add_class::<file_api::PyCancelToken>()?;
    m.add_function(wrap_pyfunction!(dict_passes::annotate_trace, m)?)?;
    m.add_function(wrap_pyfunction!(dict_passes::move_overlapping_to_stream, m)?)?;
    m.add_function(wrap_pyfunction!(dict_passes::fix_overlapping_timestamps, m)?)?;
    m.add_function(wrap_pyfunction!(file_api::annotate_file, m)?)?;
    m.add_function(wrap_pyfunction!(file_api::read_annotations, m)?)?;
    m.add_function(wrap_pyfunction!(file_api::write_annotations, m)?)?;
    m.add_function(wrap_pyfunction!(file_api::run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(summary_api::summary_report, m)?)?;
    m.add_function(wrap_pyfunction!(summary_api::find_traces, m)?)?;
    m.add_function(wrap_pyfunction!(diff_api::diff_report, m)?)?;
    m.add("DEFAULTS", defaults(m.py())?)?;
    graph_walk::register(m)?;
    Ok(())
}

/// The core's defaults of the options of `annotate_file`, the dict passes,
/// `summary_report` and `diff`: the package's signatures take theirs from here (`by`
/// has none: left out, the traces' first default key).
fn defaults(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let annotate = Options::default();
    let summary = SummaryOptions::default();
    let defaults = pyo3::types::PyDict::new(py);
    defaults.set_item("default_stream", annotate.default_stream)?;
    defaults.set_item("overlap_stream", annotate.overlap_stream)?;
    defaults.set_item("max_adjust_us", annotate.max_adjust_us)?;
    defaults.set_item("recover", annotate.recover.name())?;
    defaults.set_item("gzip_level", annotate.gzip_level)?;
    defaults.set_item("topology_only", annotate.topology_only)?;
    defaults.set_item("spans", annotate.spans.key())?;
    defaults.set_item("lanes", annotate.lanes.name())?;
    defaults.set_item("steps", summary.steps)?;
    defaults.set_item("top", summary.top)?;
    defaults.set_item("group_layers", summary.hierarchy.group_layers)?;
    // percentages, as the command line and `cgfast.diff` take them
    let diff = DiffOptions::default();
    defaults.set_item("threshold", diff.threshold * 100.0)?;
    defaults.set_item("min_change", diff.min_change * 100.0)?;
    defaults.set_item("min_share", diff.min_share * 100.0)?;
    defaults.set_item("per_rank", diff.per_rank)?;
    defaults.set_item("pool_runs", diff.pool_runs)?;
    Ok(defaults)
}
