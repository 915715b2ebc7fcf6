//! Any bytes as an annotation file (JSON or pickle, and as a pickle's body): an error
//! or annotations, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("annotations.json");
    std::fs::write(&path, data).expect("write");
    let _ = cgfast_core::read_annotations(&path);
    // after a protocol 4 header every byte is read as a pickle's opcodes
    let pickle = dir.path().join("annotations.pkl");
    std::fs::write(&pickle, [&[0x80, 4][..], data].concat()).expect("write");
    let _ = cgfast_core::read_annotations(&pickle);
});
