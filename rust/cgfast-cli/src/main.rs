fn main() {
    return_freed_buffers();
    cgfast_cli::quiet_panics();
    let cancel = cgfast_core::CancelToken::new();
    if let Err(e) = cgfast_cli::stop_on_signals(&cancel) {
        eprintln!("cgfast: warning: Ctrl-C will not clean up: {e}");
    }
    std::process::exit(cgfast_cli::run(std::env::args_os(), &cancel));
}

/// glibc raises its mmap threshold whenever a large block is freed; later buffers then
/// come from the heap and stay resident once freed. A fixed threshold keeps the peak RSS
/// at what is live: the scan's and the passes' buffers are gone before the next grow.
/// (Here only: the Python extension leaves the interpreter's allocator alone.)
fn return_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator, before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 2 << 20);
    }
}
