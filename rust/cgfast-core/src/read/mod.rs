//! Reading a trace: bytes from a plain or gzipped file ([`input`]), the events of its
//! `traceEvents` one at a time ([`events`]), and the one streaming pass that checks the
//! JSON and builds the [`TraceIndex`](crate::index::TraceIndex) ([`scan`]), reading each
//! event's fields fast or in full ([`event_fields`]).

mod event_fields;
pub mod events;
pub mod input;
pub mod scan;
