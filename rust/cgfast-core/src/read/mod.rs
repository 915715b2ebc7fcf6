//! Reading a trace: bytes from a plain or gzipped file ([`input`]); the one
//! [`grammar`] around its events, walked by the reader of `traceEvents` one element at
//! a time ([`events`]) and by the streaming pass that checks the JSON and builds the
//! [`TraceIndex`](crate::index::TraceIndex) ([`scan`]), reading each event's fields
//! fast or in full ([`event_fields`]).

mod event_fields;
pub mod events;
pub mod grammar;
pub mod input;
pub mod scan;
