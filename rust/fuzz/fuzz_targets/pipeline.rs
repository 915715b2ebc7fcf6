//! Any bytes as a trace: the pipeline never panics, and whatever it accepts it turns
//! into valid JSON with the same top-level shape.
#![no_main]

use cgfast_core::annotations::{Annotations, Item};
use cgfast_core::json_value;
use cgfast_core::pipeline::{annotate_file, Options};
use cgfast_core::annotations::value::Value;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("trace.json");
    let output = dir.path().join("out.json");
    std::fs::write(&input, data).expect("write input");
    let mut annotations = Annotations::default();
    for node in [1, 2, 4294967296] {
        annotations.nodes.insert(
            node,
            vec![
                Item::Dict(vec![("name".into(), Value::Str("n".into())), ("stream".into(), Value::Int(60))]),
                Item::Other(Value::Str("s".into())),
            ],
        );
    }
    let report = annotate_file(&input, &annotations, &output, &Options::default(), &mut |_, _, _| {});
    match report {
        Ok(_) => {
            let written = std::fs::read(&output).expect("output exists");
            let parsed = json_value::parse(&written);
            assert!(parsed.is_ok(), "output is not JSON: {:?}", String::from_utf8_lossy(&written));
        }
        Err(_) => assert!(!output.exists(), "a failed run left an output"),
    }
});
