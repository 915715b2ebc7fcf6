"""MkDocs hook: a line ``<!-- cgfast-help: SUBCOMMAND -->`` in a page becomes the
``cgfast SUBCOMMAND --help`` output of the installed package (the Rust CLI it runs
in-process), so the command-line reference is the program's own text and cannot drift."""

from __future__ import annotations

import re
import subprocess
import sys

MARKER = re.compile(r"^<!-- cgfast-help: ?([a-z ]*) -->$", re.MULTILINE)


def _help(command: str) -> str:
    argv = [sys.executable, "-m", "cgfast", *command.split(), "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.rstrip()


def on_page_markdown(markdown: str, **_: object) -> str:
    return MARKER.sub(lambda m: "```text\n" + _help(m.group(1).strip()) + "\n```", markdown)
