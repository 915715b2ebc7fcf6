//! `cgfast._cgfast`: the Rust core, seen from Python.

mod convert;
mod dict_passes;
mod diff_api;
mod file_api;
mod graph_walk;
mod summary_api;

use pyo3::prelude::*;

pyo3::create_exception!(
    cgfast,
    TraceError,
    pyo3::exceptions::PyValueError,
    "A trace or annotation file cannot be processed."
);

#[pymodule]
fn _cgfast(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("TraceError", m.py().get_type::<TraceError>())?;
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

/// The core's defaults of the annotate options: the signatures show them as literals,
/// and `tests/test_defaults.py` checks that they are these.
fn defaults(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    use cgfast_core::pipeline::{Options, DEFAULT_SPANS};
    let defaults = pyo3::types::PyDict::new(py);
    defaults.set_item("default_stream", Options::DEFAULT_STREAM)?;
    defaults.set_item("overlap_stream", Options::OVERLAP_STREAM)?;
    defaults.set_item("max_adjust_us", Options::MAX_ADJUST_US)?;
    defaults.set_item("gzip_level", Options::GZIP_LEVEL)?;
    defaults.set_item("spans", DEFAULT_SPANS)?;
    Ok(defaults)
}
