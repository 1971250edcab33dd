"""Metric summaries, and writing them: a JSONL log, TensorBoard events and a progress line.

Steps return *sums* (loss, nll, correct, weight); `summarize` turns sums accumulated over any
number of steps or eval batches into means, so averaging is exact whatever the batch sizes.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging

from transformer_jax.workdir.checkpoints import METRICS_FILE, TENSORBOARD_DIR
from transformer_jax.workdir.directory import WorkdirWriteError


def summarize(sums: dict[str, Any]) -> dict[str, float]:
    """Means per token from summed metrics: loss, nll, accuracy, perplexity (+ passthrough)."""
    weight = max(float(sums["weight"]), 1e-9)
    out = {
        "nll": float(sums["nll"]) / weight,
        "accuracy": float(sums["correct"]) / weight,
        "tokens": float(sums["weight"]),
    }
    if "loss" in sums:
        out["loss"] = float(sums["loss"]) / weight
    out["perplexity"] = math.exp(min(out["nll"], 50.0))
    return out


def sum_tree(metrics: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Elementwise sum of a list of host metric dicts."""
    return {k: np.sum([m[k] for m in metrics], axis=0) for k in metrics[0]}


class MetricWriter:
    """Appends `{"step", "split", ...}` lines to metrics.jsonl and scalars to TensorBoard.

    Only process 0 writes; on other processes every method is a no-op. `purge_step`
    (a resumed run's first step): TensorBoard hides the events of that step and later ones
    left by the killed run (tensorboardX writes a SessionLog START at that step); their
    metrics.jsonl records are dropped by `history.truncate_metrics`. A write that fails (a
    full disk) raises `WorkdirWriteError`, one line saying which checkpoint is intact.
    """

    def __init__(
        self, workdir: str | Path, *, enabled: bool = True, purge_step: int | None = None
    ) -> None:
        self.enabled = enabled
        self._tb = None
        self._jsonl = None
        if not enabled:
            return
        from tensorboardX import SummaryWriter  # no TensorFlow needed

        self._workdir = Path(workdir)
        self._failed = False  # a write failed (a full disk): `close` then only lets go
        with self._reporting("Opening the metrics files"):
            self._jsonl = open(self._workdir / METRICS_FILE, "a", encoding="utf-8")  # noqa: SIM115
            self._tb = SummaryWriter(str(self._workdir / TENSORBOARD_DIR), purge_step=purge_step)

    def write(self, step: int, split: str, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": int(step), "split": split, "time": round(time.time(), 3)}
        record.update({k: _number(v) for k, v in scalars.items()})
        with self._reporting(f"Writing the metrics of step {step}"):
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
            for key, value in scalars.items():
                self._tb.add_scalar(f"{split}/{key}", float(value), int(step))
            self._tb.flush()

    def write_text(self, step: int, tag: str, text: str) -> None:
        if self.enabled:
            with self._reporting(f"Writing the text summaries of step {step}"):
                self._tb.add_text(tag, text, int(step))

    def close(self) -> None:
        if not self.enabled:
            return
        if self._failed:  # reported once already; the files hold what was written
            with contextlib.suppress(OSError):
                self._jsonl.close()
            with contextlib.suppress(OSError):
                self._tb.close()
            return
        with self._reporting("Closing the metrics files"):
            self._jsonl.close()
            self._tb.close()

    @contextlib.contextmanager
    def _reporting(self, what: str) -> Iterator[None]:
        """Turns an OSError of the block (a full disk) into one `WorkdirWriteError` line."""
        try:
            yield
        except OSError as error:
            self._failed = True
            where = f"{what} to {self._workdir / METRICS_FILE} and {TENSORBOARD_DIR}/"
            raise WorkdirWriteError.failed(error, self._workdir, where) from error


def _number(value: Any) -> float | int | None:
    value = float(value)
    return value if math.isfinite(value) else None


class Progress:
    """One log line per fetch: step/total, loss, tokens/s and the ETA."""

    def __init__(self, total_steps: int, start_step: int):
        self.total = total_steps
        self._last_step = start_step
        self._last_time = time.perf_counter()
        self._start_step = start_step
        self._start_time = self._last_time

    def line(self, step: int, summary: dict[str, float], extra: str = "") -> str:
        now = time.perf_counter()
        dt = max(now - self._last_time, 1e-9)
        steps_per_sec = (step - self._last_step) / dt
        tokens_per_sec = summary["tokens"] / dt
        overall = (step - self._start_step) / max(now - self._start_time, 1e-9)
        eta = (self.total - step) / overall if overall > 0 else float("inf")
        self._last_step, self._last_time = step, now
        self.steps_per_sec, self.tokens_per_sec = steps_per_sec, tokens_per_sec
        return (
            f"step {step}/{self.total} ({100.0 * step / self.total:.0f}%) | "
            f"loss {summary['loss']:.4f} | nll {summary['nll']:.4f} | "
            f"{steps_per_sec:.2f} steps/s | {tokens_per_sec:,.0f} tok/s | "
            f"ETA {_duration(eta)}{extra}"
        )


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def log(message: str, *args: Any) -> None:
    """Progress goes to the absl log (stderr under `experiments/train.py`), process 0 only."""
    import jax

    if jax.process_index() == 0:
        logging.info(message, *args)
