"""The `cgfast` console script: runs the Rust command line in this process."""

import sys


def main() -> None:
    from cgfast._cgfast import run_cli

    sys.exit(run_cli(["cgfast", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
