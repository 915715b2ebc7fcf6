fn main() {
    cgfast_cli::quiet_panics();
    if let Err(e) = cgfast_cli::stop_on_signals() {
        eprintln!("cgfast: warning: Ctrl-C will not clean up: {e}");
    }
    std::process::exit(cgfast_cli::run(std::env::args_os()));
}
