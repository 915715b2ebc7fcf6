fn main() {
    cgfast_cli::quiet_panics();
    std::process::exit(cgfast_cli::run(std::env::args_os()));
}
