//! How fast the scanner validates a trace, against how fast it indexes it.
//! `cargo run --release --example scan_floor -p cgfast-core -- TRACE [skip|scan|both]`
use cgfast_core::scan_floor::{scan, Cursor, WriteKeys};
fn main() {
    let path = std::env::args().nth(1).expect("a trace");
    let mode = std::env::args().nth(2).unwrap_or_else(|| "both".into());
    let data = if mode == "scan" { Vec::new() } else { std::fs::read(&path).expect("readable") };
    for _ in 0..3 {
        if mode != "scan" {
            let t = std::time::Instant::now();
            Cursor::new(&data, 0).skip_value().expect("valid JSON");
            println!("skip_value {:.3}s", t.elapsed().as_secs_f64());
        }
        if mode != "skip" {
            let t = std::time::Instant::now();
            let (index, _layout) =
                scan(std::path::Path::new(&path), &WriteKeys::default(), &mut |_, _| {}).expect("a trace");
            println!("scan {:.3}s  tracked events {}", t.elapsed().as_secs_f64(), index.events.len());
        }
    }
}
