"""Gather a sweep's results into a CSV, a markdown table and a plot (one row per point).

A failed point's row says so in its status: "FAILED: <the error in one line>". Its wall
time is the sum of its attempts (a point stopped and resumed ran in pieces). The plot leaves
out points without a value and marks non-finite ones (a diverged run) by name.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from typing import Any

from transformer_jax.sweeps.points import DONE_FILE, TIME_FILE, SweepError, SweepPoint, read_record
from transformer_jax.workdir.history import read_metrics

COLUMNS = (
    "point",
    "status",
    "step",
    "eval_loss",
    "eval_accuracy",
    "bleu",
    "wall_time_s",
    "attempts",
    "tokens_per_sec",
)
RESULT_FILES = ("results.csv", "results.md", "results.png")


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
    # The sweep's time record sums the point's attempts; a run outside the sweep has none.
    timing = read_record(point.workdir / DONE_FILE) or read_record(point.workdir / TIME_FILE)
    if timing and "seconds" in timing:
        row["wall_time_s"] = timing["seconds"]
        row["attempts"] = timing.get("attempts")
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


def check_result_paths(sweep_dir: str | Path) -> None:
    """Raises `SweepError` if a results file's place is taken by something that is not a
    file (a directory): checked before the sweep runs, not after its last point."""
    for name in RESULT_FILES:
        path = Path(sweep_dir) / name
        if path.exists() and not path.is_file():
            raise SweepError(
                f"{path} is not a file, so the sweep's results cannot be written there: move "
                "it away (or pass another --sweep_dir). Nothing was run."
            )


def gather(points: list[SweepPoint], sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Writes results.csv, results.md and results.png in `sweep_dir`; returns the rows.
    Raises `SweepError` naming a file that cannot be written (the points' runs are kept:
    re-running the sweep skips them and writes the results again)."""
    sweep_dir = Path(sweep_dir)
    rows = [point_row(p) for p in points]
    keys = list(dict.fromkeys(k for p in points for k in p.overrides))
    header = ["point", *keys, *[c for c in COLUMNS if c != "point"]]
    path = sweep_dir
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        path = sweep_dir / "results.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        path = sweep_dir / "results.md"
        path.write_text(markdown_table(rows, header), encoding="utf-8")
        path = sweep_dir / "results.png"
        plot(rows, path)
    except OSError as error:
        raise SweepError(
            f"Cannot write {path} ({error.strerror or error}): free or fix that path, then "
            "re-run the same command (finished points are skipped)."
        ) from None
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

    fig, axes = plt.subplots(1, 2, figsize=(max(6, 1.6 * len(rows)), 4), squeeze=False)
    for ax, key, label in zip(
        axes[0], ("eval_loss", "bleu"), ("validation loss", "BLEU"), strict=True
    ):
        positions, heights, ticks = bars(rows, key)
        ax.bar(positions, heights, color="tab:blue")
        ax.set_xticks(range(len(rows)), ticks, rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_title(label)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def bars(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float], list[str]]:
    """(positions, heights, tick labels) of one panel. No bar for a point without a value (a
    0.0 bar would look like the best loss) nor for NaN/inf (matplotlib would blank the whole
    panel): their tick labels say why."""
    values = [_number(row.get(key)) for row in rows]
    finite = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    ticks = [
        row["point"] if i in finite else f"{row['point']} ({values[i] or 'no value'})"
        for i, row in enumerate(rows)
    ]
    return finite, [values[i] for i in finite], ticks


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")  # a "|" in an error line would split the cell
