//! Any bytes as a trace: the pipeline never panics, and whatever it accepts it turns
//! into a valid trace (one it accepts again).
#![no_main]

use cgfast_core::{annotate_file, Annotations, CancelToken, Item, Options, Value};
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
    let run = |from: &std::path::Path, to: &std::path::Path| {
        annotate_file(from, &annotations, to, &Options::default(), &CancelToken::new(), &mut |_, _, _| {})
    };
    match run(&input, &output) {
        Ok(_) => {
            let again = dir.path().join("again.json");
            let reread = run(&output, &again);
            assert!(reread.is_ok(), "the output is not a valid trace: {:?}", reread.err());
        }
        Err(_) => assert!(!output.exists(), "a failed run left an output"),
    }
});
