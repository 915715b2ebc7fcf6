//! cgfast's core: everything the CLI and the Python bindings share, free of Python.

pub mod annotation_file;
pub mod annotations;
pub mod cancel;
pub mod direct_io;
pub mod edit;
mod event_fields;
pub mod events;
pub mod inputs;
pub mod io;
pub mod json;
pub mod json_value;
pub mod key;
pub mod lane_plan;
pub mod parallel;
pub mod passes;
pub mod paths;
pub mod pickle;
pub mod pipeline;
pub mod recover;
pub mod rewrite;
pub mod scan;
pub mod spans;
pub mod summary;
pub mod trace;
pub mod unicode;
pub mod value;
pub mod writes;
