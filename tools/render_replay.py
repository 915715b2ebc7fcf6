"""Draw one graph replay of an annotated trace as an SVG: its kernels on their lanes,
coloured by module, under the module scope spans ``cgfast annotate`` added — what a
trace viewer shows. Makes the picture of the README (``docs/img/replay.svg``):

    python tools/render_replay.py ANNOTATED_TRACE -o docs/img/replay.svg [--replay -1] [--key module]

``--replay`` picks a replay by its place among the trace's replays (negative from the end).
"""

from __future__ import annotations

import argparse
import colorsys
import gzip
import hashlib
import json
import os
import tempfile
from html import escape

WIDTH, ROW, GAP, LEFT, TOP = 1100, 22, 4, 70, 28
WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path: str) -> list:
    with open(path, "rb") as file:
        gzipped = file.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rt") if gzipped else open(path) as file:
        return json.load(file)["traceEvents"]


def colour(name: str) -> str:
    """A stable colour per module path (its first segments), so a module's kernels and
    its span match."""
    digest = hashlib.blake2b(name.encode(), digest_size=2).digest()
    hue = int.from_bytes(digest, "big") / 65536
    r, g, b = colorsys.hls_to_rgb(hue, 0.62, 0.55)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def replay_events(events: list, which: int, key: str) -> tuple:
    kernels = [e for e in events if e.get("cat") in WORK and key in e.get("args", {})]
    by_replay: dict = {}
    for e in kernels:
        by_replay.setdefault(e["args"].get("correlation"), []).append(e)
    replays = sorted(by_replay.values(), key=lambda r: min(e["ts"] for e in r))
    if not replays:
        raise SystemExit(f"no kernel carries args[{key!r}]: annotate the trace first")
    chosen = replays[which]
    start = min(e["ts"] for e in chosen)
    end = max(e["ts"] + e["dur"] for e in chosen)
    lanes = {e["tid"] for e in chosen}
    spans = [
        e
        for e in events
        if e.get("args", {}).get("cgfast") == "scope"
        and e.get("tid") in lanes
        and start <= e["ts"]
        and e["ts"] + e["dur"] <= end + 1e-3
    ]
    return chosen, spans, start, end


def render(kernels: list, spans: list, start: float, end: float, title: str) -> str:
    scale = (WIDTH - LEFT - 10) / (end - start)
    depth = max((s["name"].count(".") + 1 for s in spans), default=0)
    lanes = sorted({e["tid"] for e in kernels}, key=str)
    rows = [(lane, d) for lane in lanes for d in range(depth)] + [(lane, "kernels") for lane in lanes]
    height = TOP + len(rows) * (ROW + GAP) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="Helvetica,Arial,sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="8" y="17" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]

    def box(x0, x1, y, fill, label, tip):
        x, w = LEFT + (x0 - start) * scale, max((x1 - x0) * scale, 0.8)
        out.append(f"<g><title>{escape(tip)}</title>")
        out.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW}" fill="{fill}" stroke="#ffffff" stroke-width="0.5"/>'
        )
        if w > 7 * len(label) * 0.85:
            out.append(f'<text x="{x + 3:.2f}" y="{y + 15}" fill="#111">{escape(label)}</text>')
        out.append("</g>")

    for i, (lane, kind) in enumerate(rows):
        y = TOP + i * (ROW + GAP)
        label = f"stream {lane}" if kind == "kernels" else ("scopes" if kind == 0 else "")
        out.append(f'<text x="6" y="{y + 15}" fill="#555">{label}</text>')
        if kind == "kernels":
            for e in kernels:
                if e["tid"] == lane:
                    module = str(e["args"].get("module", ""))
                    tip = f"{e['name']}\nmodule: {module}\nFX nodes: {e['args'].get('name', '')}\n{e['dur']:.3f} us"
                    box(e["ts"], e["ts"] + e["dur"], y, colour(module), "", tip)
        else:
            for s in spans:
                if s["tid"] == lane and s["name"].count(".") == kind:
                    leaf = s["name"].rsplit(".", 1)[-1]
                    box(
                        s["ts"],
                        s["ts"] + s["dur"],
                        y,
                        colour(s["name"]),
                        leaf,
                        f"{s['name']}\n{s['dur']:.3f} us",
                    )
    axis_y = TOP + len(rows) * (ROW + GAP) + 14
    out.append(f'<text x="{LEFT}" y="{axis_y}" fill="#555">0 µs</text>')
    out.append(
        f'<text x="{WIDTH - 10}" y="{axis_y}" fill="#555" text-anchor="end">{end - start:.1f} µs</text>'
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--replay", type=int, default=-1)
    parser.add_argument("--key", default="module")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    kernels, spans, start, end = replay_events(load(args.trace), args.replay, args.key)
    title = args.title or f"one replay of {os.path.basename(args.trace)}: {len(kernels)} kernels"
    svg = render(kernels, spans, start, end, title)
    directory = os.path.dirname(os.path.abspath(args.output))
    with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as file:
        file.write(svg)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(file.name, 0o666 & ~umask)
    os.replace(file.name, args.output)


if __name__ == "__main__":
    main()
