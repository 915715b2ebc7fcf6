//! Writing the output: pass two streams the input again and splices in what the passes
//! changed ([`rewrite`]), with each node's annotation prepared once as `args` text
//! ([`args_text`]) and the scope spans appended as events ([`spans_json`]), into a file
//! that appears only when complete ([`output`]), written around the page cache when
//! large ([`direct_io`]).

pub mod args_text;
pub mod direct_io;
pub mod output;
pub mod rewrite;
pub mod spans_json;
