"""The `cgfast` console script: runs the Rust command line in this process (``cgfast run``,
which starts programs under Python's start-up hook, is the package's own)."""

import signal
import sys

INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _stop(signum, frame):
    raise KeyboardInterrupt


def main() -> None:
    if sys.argv[1:2] == ["run"]:
        # a Python command: it starts the program under Python's start-up hook
        from cgfast.run._command import main as run

        sys.exit(run(sys.argv[2:]))
    # SIGTERM stops a run like Ctrl-C: temporaries removed, one line, status 130
    signal.signal(signal.SIGTERM, _stop)
    try:
        from cgfast._cgfast import run_cli

        status = run_cli(["cgfast", *sys.argv[1:]])
    except KeyboardInterrupt:
        # before or after the command line ran (during it, it reports this itself)
        print("cgfast: interrupted", file=sys.stderr)
        status = INTERRUPTED
    sys.exit(status)


if __name__ == "__main__":
    main()
