"""The summary of docs/benchmarks.md: one table and a few bar charts, from the benchmarks' JSON.

Every ``*.json`` file in the results folder (default ``docs/bench/``) that has a top-level
``summary`` list is read (``read``, ``prepare``, ``mount`` first, then by file name); anything else in the folder is ignored. So a new
benchmark folds in by writing its JSON there (``make bench`` passes each script an output path
in that folder) with this shape::

    {
      "source": {"script": "tools/bench/x.py", "data": "...", "samples": 256000, "gb": 3.6,
                 "load": [8.1, 9.0], "date": "2026-11-24 22:10 UTC", "argv": [...]},
      "summary": [
        {"figure": "random access by position",     # the row's title
         "unit": "samples/s",                       # "s" is formatted as seconds
         "higher_is_better": true,
         "values": {"shardstore": 281000, "wids/webdataset": 95000, "floor": 330000},
         "labels": {"wids/webdataset": "wids"},     # optional: what a cell's figure is
         "notes": {"ratarmount": "no such figure"}, # optional: why a cell is empty
         "target": {"column": "wids/webdataset", "ratio": 3.0, "also": ["ratarmount"]},  # optional
         "chart": "reading"}                        # optional: rows with the same chart share a PNG
      ]
    }

Columns are shardstore, Energon, wids/webdataset, ratarmount and floor, then any other column a
row names (e.g. ``h5py`` for the episode benchmarks), in order of first appearance. "vs best peer"
is shardstore's figure against the best of the peer columns (every column but shardstore and
floor), as a speed-up (> 1: shardstore is faster). A target is met when that speed-up against its
column (and each of ``also``) is at least ``ratio``.

The table and the chart links replace what is between ``<!-- summary:start -->`` and
``<!-- summary:end -->`` in the page; the charts are PNGs written with matplotlib (log scale
when a chart's values span more than 20x).

Example: python tools/bench/summary.py --results docs/bench --doc docs/benchmarks.md --img docs/img
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = ["shardstore", "Energon", "wids/webdataset", "ratarmount", "floor"]
NOT_PEERS = {"shardstore", "floor"}
START, END = "<!-- summary:start -->", "<!-- summary:end -->"
LOG_SPREAD = 20.0


@dataclass
class Row:
    """One figure: values by column, as a benchmark's JSON gives it."""

    figure: str
    unit: str
    higher_is_better: bool
    values: dict[str, float]
    labels: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    target: dict[str, Any] | None = None
    chart: str | None = None
    source: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str) -> Row:
        return cls(
            d["figure"], d.get("unit", ""), bool(d.get("higher_is_better", True)),
            {k: float(v) for k, v in d.get("values", {}).items() if v is not None},
            d.get("labels", {}), d.get("notes", {}), d.get("target"), d.get("chart"), source,
        )

    def speedup(self, column: str) -> float | None:
        """How many times better shardstore's figure is than ``column``'s (None if either is missing)."""
        ours, theirs = self.values.get("shardstore"), self.values.get(column)
        if not ours or not theirs:
            return None
        return ours / theirs if self.higher_is_better else theirs / ours

    def best_peer(self) -> str | None:
        peers = [c for c in self.values if c not in NOT_PEERS]
        if not peers:
            return None
        pick = max if self.higher_is_better else min
        return pick(peers, key=lambda c: self.values[c])

    def target_check(self) -> tuple[bool, float] | None:
        """(met, the smallest speed-up over the target's columns), or None without a target or figures."""
        if not self.target:
            return None
        cols = [self.target["column"], *self.target.get("also", [])]
        ups = [u for c in cols if (u := self.speedup(c)) is not None]
        if not ups:
            return None
        return min(ups) >= self.target["ratio"], min(ups)


def load(results: Path) -> tuple[list[Row], list[dict[str, Any]]]:
    """Every summary row of the folder's JSON files, and each file's ``source``."""
    rows: list[Row] = []
    sources: list[dict[str, Any]] = []
    for path in sorted(results.glob("*.json"), key=_order):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"summary: skipping {path}: {e}", file=sys.stderr)
            continue
        if not isinstance(data, dict) or not isinstance(data.get("summary"), list):
            continue
        src = {"file": path.name, **data.get("source", {})}
        sources.append(src)
        rows += [Row.from_json(r, path.name) for r in data["summary"]]
    return rows, sources


def _order(path: Path) -> tuple[int, str]:
    """read, prepare and mount first (the page's order), then the other files by name."""
    first = ["read", "prepare", "mount"]
    return (first.index(path.stem) if path.stem in first else len(first), path.name)


def columns(rows: list[Row]) -> list[str]:
    out = list(COLUMNS)
    for r in rows:
        out += [c for c in (*r.values, *r.labels, *r.notes) if c not in out]
    return out


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.2f} s" if value < 100 else f"{value:.0f} s"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def cell(row: Row, col: str) -> str:
    if col in row.values:
        text = fmt(row.values[col], row.unit)
        return f"{text} ({row.labels[col]})" if col in row.labels else text
    return f"_{row.notes[col]}_" if col in row.notes else "-"


def table(rows: list[Row]) -> str:
    cols = columns(rows)
    head = ["figure", *cols, "vs best peer", "target"]
    lines = ["| " + " | ".join(head) + " |", "| --- | " + " | ".join("---:" for _ in head[1:-1]) + " | --- |"]
    for r in rows:
        best = r.best_peer()
        up = r.speedup(best) if best else None
        vs = f"**{up:.2f}x** ({best})" if up is not None else "-"
        check = r.target_check()
        if r.target and check:
            cols_t = ", ".join([r.target["column"], *r.target.get("also", [])])
            tgt = f">= {r.target['ratio']:g}x {cols_t}: {'met' if check[0] else '**missed**'} ({check[1]:.2f}x)"
        elif r.target:
            tgt = f">= {r.target['ratio']:g}x {r.target['column']}: not measured"
        else:
            tgt = ""
        unit = f" ({r.unit})" if r.unit else ""
        cells = [r.figure + unit, *(cell(r, c) for c in cols), vs, tgt]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def charts(rows: list[Row], img: Path) -> list[tuple[str, Path]]:
    """One grouped bar chart per ``chart`` name: a group per row, a bar per column; (title, file)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[Row]] = {}
    for r in rows:
        if r.chart and r.values:
            groups.setdefault(r.chart, []).append(r)
    img.mkdir(parents=True, exist_ok=True)
    colors = {c: f"C{i}" for i, c in enumerate(columns(rows))}  # one colour per tool in every chart
    out = []
    for name, group in groups.items():
        cols = [c for c in columns(group) if any(c in r.values for r in group)]
        values = [v for r in group for v in r.values.values() if v > 0]
        log = bool(values) and max(values) / min(values) > LOG_SPREAD
        width = 0.8 / len(cols)
        fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(group) + 2.5), 3.8))
        for i, col in enumerate(cols):
            xs = [j + (i - (len(cols) - 1) / 2) * width for j, r in enumerate(group) if col in r.values]
            ys = [r.values[col] for r in group if col in r.values]
            bars = ax.bar(xs, ys, width, label=col, color=colors[col])
            for b, y in zip(bars, ys, strict=True):
                ax.annotate(fmt(y, group[0].unit if group[0].unit == "s" else ""), (b.get_x() + b.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=7, rotation=90 if len(cols) > 3 else 0)
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([_wrap(r.figure) for r in group], fontsize=8)
        units = sorted({r.unit for r in group})
        better = "higher" if group[0].higher_is_better else "lower"
        ax.set_ylabel(f"{' / '.join(units)} ({better} is better{', log scale' if log else ''})", fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.margins(y=0.25)
        ax.legend(fontsize=8, ncol=min(len(cols), 5), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
        fig.suptitle(name, fontsize=10)
        fig.tight_layout()
        path = img / f"bench-{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append((name, path))
    return out


def _wrap(text: str, width: int = 22) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    return "\n".join([*lines, line])


def sources_text(sources: list[dict[str, Any]]) -> str:
    lines = []
    for s in sources:
        load = s.get("load")
        load_txt = f", load average {load[0]:.1f} before / {load[1]:.1f} after" if load else ""
        data = f" on `{s['data']}`" if s.get("data") else ""
        size = f" ({s['samples']:,} samples, {s['gb']} GB)" if s.get("samples") and s.get("gb") else ""
        args = " ".join(s.get("argv", []))
        cmd = f"`{s.get('script', s['file'])}{' ' + args if args else ''}`"
        lines.append(f"- {cmd}{data}{size}, {s.get('date', '?')}{load_txt} ({s['file']})")
    return "\n".join(lines)


def render(rows: list[Row], sources: list[dict[str, Any]], images: list[tuple[str, Path]], doc_dir: Path) -> str:
    pics = "\n\n".join(f"![{name}]({os.path.relpath(p, doc_dir)})" for name, p in images)
    return "\n\n".join(
        part for part in (
            table(rows) if rows else "(no benchmark results yet: run `make bench`)",
            "Measured by (each script's JSON in the results folder):\n\n" + sources_text(sources) if sources else "",
            pics,
        ) if part
    )


def update_doc(doc: Path, block: str) -> None:
    """Replace the text between the summary markers (which must be there) with ``block``."""
    text = doc.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{doc}: no {START} ... {END} markers to put the summary between")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    tmp = doc.with_suffix(doc.suffix + ".tmp")
    tmp.write_text(f"{head}{START}\n{block}\n{END}{tail}")
    os.replace(tmp, doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="docs/bench", help="folder of the benchmarks' JSON (default docs/bench)")
    ap.add_argument("--doc", help="page whose summary block to replace (e.g. docs/benchmarks.md)")
    ap.add_argument("--img", default="docs/img", help="folder for the chart PNGs (default docs/img)")
    args = ap.parse_args()
    rows, sources = load(Path(args.results))
    doc_dir = Path(args.doc).parent if args.doc else Path(args.img).parent
    images = charts(rows, Path(args.img)) if rows else []
    block = render(rows, sources, images, doc_dir)
    if args.doc:
        update_doc(Path(args.doc), block)
        print(f"summary: {len(rows)} rows from {len(sources)} files, {len(images)} charts -> {args.doc}")
    else:
        print(block)


if __name__ == "__main__":
    main()
