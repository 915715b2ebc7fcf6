//! Which files a run touches: the inputs a command line names ([`inputs`]), the default
//! output and annotation file names ([`paths`]), the traces that annotation files list
//! ([`recorded`]), and work on many files at once ([`many`]).

pub(crate) mod inputs;
pub(crate) mod many;
pub(crate) mod paths;
pub(crate) mod recorded;
