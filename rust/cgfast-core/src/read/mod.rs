//! Reading a trace: bytes from a plain or gzipped file ([`input`]); the one [`grammar`]
//! around its events (counting the invalid UTF-8 of their strings), walked by the
//! reader of `traceEvents` one element at a time ([`events`]) and by the streaming pass
//! that checks the JSON and builds the [`TraceIndex`](crate::index::TraceIndex)
//! ([`scan`], whole or in [`parallel`] segments), reading each event's fields fast or
//! in full ([`event_fields`]), decoding them ([`decode`]) and recording them
//! ([`ingest`]) with their place in the input ([`layout`]).

pub(crate) mod decode;
pub(crate) mod event_fields;
pub(crate) mod events;
pub(crate) mod grammar;
pub(crate) mod ingest;
pub(crate) mod input;
pub(crate) mod layout;
pub(crate) mod parallel;
pub(crate) mod scan;
