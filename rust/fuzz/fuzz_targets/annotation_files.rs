//! Any bytes as an annotation file (JSON or pickle): an error or annotations, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("annotations.json");
    std::fs::write(&path, data).expect("write");
    let _ = cgfast_core::annotations::file::read(&path);
    let _ = cgfast_core::annotations::pickle::load(data);
});
