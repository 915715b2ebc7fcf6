//! Writing the output: pass two streams the input again and splices in what the passes
//! changed ([`rewrite`]), in input order ([`changes`]), each changed event edited in
//! place ([`event_edit`]) with each node's annotation prepared once as `args` text
//! ([`args_text`]) and the scope spans appended as events ([`spans_json`]), into a file
//! that appears only when complete ([`atomic_file`]), written on a thread of its own or
//! gzipped on all cores ([`sink`], [`gzip`]), around the page cache when large
//! ([`direct_io`]).

pub(crate) mod args_text;
pub(crate) mod atomic_file;
pub(crate) mod changes;
pub(crate) mod direct_io;
pub(crate) mod event_edit;
pub(crate) mod gzip;
pub(crate) mod rewrite;
pub(crate) mod sink;
pub(crate) mod spans_json;
