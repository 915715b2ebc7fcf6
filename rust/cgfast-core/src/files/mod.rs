//! Which files a run touches: the inputs a command line names ([`inputs`]), the default
//! output and annotation file names ([`paths`]), and work on many files at once ([`many`]).

pub(crate) mod inputs;
pub(crate) mod many;
pub(crate) mod paths;
