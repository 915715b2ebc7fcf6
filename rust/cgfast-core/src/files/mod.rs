//! Which files a run touches: the inputs a command line names ([`inputs`]), the default
//! output and annotation file names ([`paths`]), and work on many files at once ([`many`]).

pub mod inputs;
pub mod many;
pub mod paths;
