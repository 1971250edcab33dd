"""Gather a sweep's results into a CSV, a markdown table and a plot (one row per point).

A failed point's row says so in its status: "FAILED: <the error in one line>".
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

from transformer_jax.sweeps.runner import DONE_FILE, SweepPoint
from transformer_jax.workdir.history import read_metrics

COLUMNS = (
    "point",
    "status",
    "step",
    "eval_loss",
    "eval_accuracy",
    "bleu",
    "wall_time_s",
    "tokens_per_sec",
)


def point_row(point: SweepPoint) -> dict[str, Any]:
    """The final validation loss, BLEU, wall time and train tokens/s of one point."""
    row: dict[str, Any] = {"point": point.name, **point.overrides}
    records = read_metrics(point.workdir)
    evals = [r for r in records if r.get("split") == "eval"]
    trains = [r for r in records if r.get("split") == "train"]
    row["status"] = _status(point, bool(records))
    last = evals[-1] if evals else {}
    row["step"] = last.get("step")
    row["eval_loss"] = last.get("nll")
    row["eval_accuracy"] = last.get("accuracy")
    row["bleu"] = last.get("bleu")
    speeds = [r["tokens_per_sec"] for r in trains if r.get("tokens_per_sec")]
    row["tokens_per_sec"] = round(statistics.median(speeds)) if speeds else None
    done_file = point.workdir / DONE_FILE
    if done_file.exists():
        row["wall_time_s"] = json.loads(done_file.read_text()).get("seconds")
    elif records:
        row["wall_time_s"] = round(records[-1]["time"] - records[0]["time"], 1)
    else:
        row["wall_time_s"] = None
    return row


def _status(point: SweepPoint, started: bool) -> str:
    """ "done", "FAILED: <the error in one line>", "partial" or "not started"."""
    if point.done:
        return "done"
    failure = point.failure
    if failure is not None:
        return f"FAILED: {failure}"
    return "partial" if started else "not started"


def gather(points: list[SweepPoint], sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Writes results.csv, results.md and results.png in `sweep_dir`; returns the rows."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    rows = [point_row(p) for p in points]
    keys = list(dict.fromkeys(k for p in points for k in p.overrides))
    header = ["point", *keys, *[c for c in COLUMNS if c != "point"]]
    with open(sweep_dir / "results.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (sweep_dir / "results.md").write_text(markdown_table(rows, header), encoding="utf-8")
    plot(rows, sweep_dir / "results.png")
    return rows


def markdown_table(rows: list[dict[str, Any]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(k)) for k in header) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Two bar charts: final validation loss and BLEU per point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["point"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(max(6, 1.6 * len(rows)), 4), squeeze=False)
    for ax, key, label in zip(
        axes[0], ("eval_loss", "bleu"), ("validation loss", "BLEU"), strict=True
    ):
        values = [r.get(key) if r.get(key) is not None else 0.0 for r in rows]
        ax.bar(range(len(rows)), values, color="tab:blue")
        ax.set_xticks(range(len(rows)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(label)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")  # a "|" in an error line would split the cell
