"""``cgfast run [OPTIONS] -- COMMAND [ARGS...]``: start the command with cgfast active in
every Python process it starts, wait for it, and say what was recorded.

The program's stdin, stdout and exit status are its own: cgfast speaks on stderr, one
line at the start and a short block at the end. SIGTERM, SIGHUP and SIGQUIT are passed
on to the command, and so is SIGINT unless the terminal sent it (it reaches the command
itself then); ``cgfast run`` ends with the command and exits with its status (128 + N
for a command ended by signal N).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Iterator, List, Optional, Sequence

import cgfast
from cgfast.run._settings import ENV_VAR, ProfileWindow, RunSettings

PROG = "cgfast run"
USAGE_ERROR = 2
NOT_FOUND = 127  # as shells report a command they cannot find
NOT_EXECUTABLE = 126
STARTUP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")
PACKAGE_ENV_VAR = "CGFAST_RUN_PACKAGE"
INDUCTOR_ENV_VAR = "CGFAST_INDUCTOR_ANNOTATIONS"
INDUCTOR_FLOPS_ENV_VAR = "CGFAST_INDUCTOR_FLOPS"
DEFAULT_REPLAYS = 50
DEFAULT_SKIP = 10
DEFAULT_DEPTH = 3
ANNOTATION_FILE = re.compile(r"kernel_annotations_rank(\d+)_(\d+)\.json$")
PROFILE_TRACE = re.compile(r"(\d+)\..*\.pt\.trace\.json\.gz$")
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class UsageError(Exception):
    """A bad flag or ``--out``: one line, exit status 2, before the command starts."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [OPTIONS] -- COMMAND [ARGS...]",
        description=(
            "Run COMMAND with cgfast active in every Python process it starts (the program, "
            "multiprocessing and subprocess children, torchrun's workers), with no edit to the "
            "program: every CUDA-graph capture is recorded, each module that runs during a capture "
            "is named by its path in its model, torch.compile's kernels are bracketed by the "
            "Inductor toggle, and each process saves its annotation file into --out whenever its "
            "profiler exports a trace, and at exit. Then `cgfast annotate OUT` pairs every trace "
            "the program wrote with its process's file. Works through a sitecustomize on "
            "PYTHONPATH: python -S, -I and -E are out of reach."
        ),
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="where annotation files (and --profile traces) go; made if its parent exists "
        "[default: cgfast-run-<date>-<time> here]",
    )
    p.add_argument(
        "--no-record", action="store_true", help="record nothing the program does not ask for itself"
    )
    p.add_argument("--no-modules", action="store_true", help="do not name modules")
    p.add_argument("--no-inductor", action="store_true", help="leave the Inductor toggle off")
    p.add_argument(
        "--stacks", action="store_true", help="also record the Python line that launched each kernel"
    )
    p.add_argument(
        "--flops",
        action="store_true",
        help="also count each op's FLOPs and bytes on the kernels it launched (torch's FLOP formulas)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="profile graph replays in each process into --out, annotate the traces when the "
        "program ends and print where the GPU time went, by module",
    )
    p.add_argument(
        "--replays",
        type=_positive,
        default=DEFAULT_REPLAYS,
        metavar="N",
        help=f"graph replays profiled per process, with --profile [default: {DEFAULT_REPLAYS}]",
    )
    p.add_argument(
        "--skip",
        type=_not_negative,
        default=DEFAULT_SKIP,
        metavar="M",
        help=f"graph replays left unprofiled first (warm-up), with --profile [default: {DEFAULT_SKIP}]",
    )
    p.add_argument(
        "--depth",
        type=_positive,
        default=DEFAULT_DEPTH,
        metavar="N",
        help=f"module paths rolled up to N segments in the --profile summary [default: {DEFAULT_DEPTH}]",
    )
    p.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS...]", help="the program to run"
    )
    return p


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _not_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def main(argv: Sequence[str]) -> int:
    """``cgfast run`` with ``argv`` (what follows ``run``); the exit status."""
    args = parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        if not command:
            raise UsageError("no command given: cgfast run [OPTIONS] -- COMMAND [ARGS...]")
        out = prepare_out(args.out)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    settings = RunSettings(
        out=out,
        record=not args.no_record,
        modules=not args.no_modules,
        inductor=not args.no_inductor,
        stacks=args.stacks,
        flops=args.flops,
        profile=ProfileWindow(replays=args.replays, skip=args.skip) if args.profile else None,
    )
    print(f"{PROG}: {describe(settings)}", file=sys.stderr)
    status = run_command(command, environment(settings))
    report(settings, command, status, args.depth)
    return status


def prepare_out(out: Optional[str]) -> str:
    """The absolute run directory, made if need be and checked writable."""
    if out is None:
        out = time.strftime("cgfast-run-%Y%m%d-%H%M%S")
    path = os.path.abspath(out)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--out {out}: not a directory")
    parent = os.path.dirname(path)
    if not os.path.isdir(path) and not os.path.isdir(parent):
        raise UsageError(f"--out {out}: {parent} does not exist")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
    return path


def describe(settings: RunSettings) -> str:
    """The start line: where the files go and what is on."""
    on: List[str] = []
    if settings.record:
        on.append("every capture recorded")
        if settings.modules:
            on.append("modules named")
        if settings.inductor:
            on.append("Inductor toggle on")
        if settings.stacks:
            on.append("launch lines")
        if settings.flops:
            on.append("FLOPs and bytes")
    else:
        on.append("recording only what the program asks for")
    if settings.profile is not None:
        window = settings.profile
        on.append(f"profiling {window.replays} graph replays per process after {window.skip}")
    return f"annotations of every Python process go to {settings.out} ({', '.join(on)})"


def environment(settings: RunSettings) -> dict:
    """The command's environment: the start-up hook first on PYTHONPATH, the settings."""
    env = dict(os.environ)
    paths = [STARTUP_DIR, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[ENV_VAR] = settings.to_env()
    env[PACKAGE_ENV_VAR] = os.path.dirname(os.path.abspath(cgfast.__file__))
    if settings.record and settings.inductor:
        env[INDUCTOR_ENV_VAR] = "1"
        if settings.flops:
            env[INDUCTOR_FLOPS_ENV_VAR] = "1"
    return env


def run_command(command: List[str], env: dict) -> int:
    """Run ``command`` to its end, passing signals on; its exit status."""
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        print(f"{PROG}: error: {command[0]}: command not found", file=sys.stderr)
        return NOT_FOUND
    except PermissionError:
        print(f"{PROG}: error: {command[0]}: permission denied", file=sys.stderr)
        return NOT_EXECUTABLE
    with passing_signals_to(child):
        status = child.wait()
    return status if status >= 0 else 128 - status


@contextlib.contextmanager
def passing_signals_to(child: subprocess.Popen) -> Iterator[None]:
    def pass_on(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    # Ctrl-C at a terminal reaches the whole foreground process group, the command too
    interrupt = signal.SIG_IGN if _terminal_in_foreground() else pass_on
    previous = {signum: signal.signal(signum, pass_on) for signum in FORWARDED}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _terminal_in_foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


# -- the end ------------------------------------------------------------------------------


def annotation_files(out: str) -> List[str]:
    try:
        names = os.listdir(out)
    except OSError:  # removed or unreadable since the start: nothing to report from it
        return []
    return sorted(os.path.join(out, n) for n in names if ANNOTATION_FILE.match(n))


def listed_traces(annotation_file: str) -> List[str]:
    """The traces an annotation file lists (those its process exported)."""
    try:
        with open(annotation_file, encoding="utf-8") as f:
            return list(json.load(f).get("traces", []))
    except (OSError, ValueError, AttributeError):
        return []


def report(settings: RunSettings, command: List[str], status: int, depth: int) -> None:
    """The block at the end (on stderr): the command's status, with ``--profile`` the
    summary of each rank, then the files and what to run next."""
    out = settings.out
    print(f"{PROG}: {os.path.basename(command[0])} exited with status {status}", file=sys.stderr)
    files = annotation_files(out)
    ranks = sorted({int(ANNOTATION_FILE.match(os.path.basename(f)).group(1)) for f in files})  # type: ignore[union-attr]
    if files:
        lines = [
            f"  annotations  {len(files)} file{'s' if len(files) != 1 else ''} "
            f"(rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))}) in {out}"
        ]
    else:
        why = "no process captured a CUDA graph" if os.path.isdir(out) else f"{out} is gone"
        lines = [f"  annotations  none in {out}: {why}"]
    if settings.profile is not None and files:
        lines += profile_report(out, depth)
    elif files:
        exported = sum(len(listed_traces(f)) for f in files)
        if exported:
            lines.append(f"  traces       {exported} exported by the program, listed in those files")
            lines.append(
                f"  next         cgfast annotate {out}    # each trace with its process's annotations"
            )
        else:
            lines.append(
                "  traces       none exported: profile the program (its own profiler, or cgfast run --profile)"
            )
    print("\n".join(lines), file=sys.stderr)


def profile_report(out: str, depth: int) -> List[str]:
    """Annotate the window's traces (a progress bar on a terminal) and print each
    rank's summary by module; the lines naming the files and what to run next."""
    traces = sorted(glob.glob(os.path.join(out, "*.pt.trace.json.gz")))
    traces = [t for t in traces if ".annotated." not in t and PROFILE_TRACE.match(os.path.basename(t))]
    if not traces:
        return ["  traces       none: no process replayed a graph past the --skip window"]
    # annotate's report is not wanted here, its errors and progress (stderr) are
    status = _cli(
        ["annotate", out] + ([] if sys.stderr.isatty() else ["--no-progress"]), stdout_to=os.devnull
    )
    annotated = sorted(glob.glob(os.path.join(out, "*.pt.trace.annotated.json.gz")))
    by_rank: dict = {}
    for path in annotated:
        rank = int(PROFILE_TRACE.match(os.path.basename(path).replace(".annotated", "")).group(1))  # type: ignore[union-attr]
        by_rank.setdefault(rank, []).append(path)
    for rank, paths in sorted(by_rank.items()):
        print(f"\nrank {rank}:" if len(by_rank) > 1 else "", file=sys.stderr)
        _cli(["summary", *paths, "--by", "module", "--depth", str(depth), "--no-progress"])
    print(file=sys.stderr)
    failed = "" if status == 0 else " (some failed: see above)"
    return [
        f"  traces       {len(annotated)} annotated in {out}{failed}",
        f"  next         cgfast summary {out} --chart summary.html",
        f"               cgfast diff BASE_DIR {out}",
    ]


def _cli(argv: List[str], stdout_to: Optional[str] = None) -> int:
    """The Rust command line in this process, its stdout sent to stderr (the program's
    stdout is the program's alone), or to ``stdout_to``."""
    from cgfast._cgfast import run_cli

    sys.stdout.flush()
    saved = os.dup(1)
    target = os.open(stdout_to, os.O_WRONLY) if stdout_to else os.dup(2)
    try:
        os.dup2(target, 1)
        return run_cli(["cgfast", *argv])
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(target)
