"""The README run and deep_sampled launched end to end, and what their logs and files say.

    argv = runs.train_argv("configs/fra_eng.py:deep_sampled", workdir, overrides)
    job = jobs.run("deep_sampled", argv, timeout_s=300, log_dir=...)
    result = runs.read_run(job, workdir)

Each launch is `python -m experiments.train` in a fresh workdir, as a user types it, with
the persistent compilation cache in a directory of the check's own (a fresh one is a cold
compile; the README run's second launch reuses the first's). From the launch:

  setup_s        launch -> the loop's "Training ..." line: imports, the dataset and its
                 tokenizers (built or read), the model's init
  first_step_s   launch -> the end of step 1, estimated: the first progress line (step K,
                 the train step's compile inside) minus K-1 steps at the steady rate
  steps_per_s    the steady rate: the median of the progress lines after the first
  wall_s         launch -> exit, the closing test report included (report_s: after the
                 last progress line: the last validation, the checkpoint and the report)
  bleu           `<workdir>/eval_report.json` (sacreBLEU, the run's split, beam and pairs)
  compile        the launch's line of `<workdir>/compile_log.jsonl`: every program it
                 compiled (name, kind, seconds, from the cache or not)

A launch cut off at its time limit still reports how far it got (steps reached, the rate).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.accelerator import jobs

# transformer_jax/training/metrics.py's Progress.line.
PROGRESS = re.compile(r"step (\d+)/(\d+) \(\d+%\) \|.*?\| ([\d.]+) steps/s \| ([\d,]+) tok/s")
TRAINING = re.compile(r"Training .* for \d+ steps")
COMPILED = re.compile(r"^Compiled: \d+ programs? in .*")


def train_argv(config: str, workdir: Path, overrides: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "experiments.train",
        f"--config={config}",
        f"--workdir={workdir}",
        *overrides,
    ]


def read_run(job: jobs.Job, workdir: Path) -> dict[str, Any]:
    """What the launch's log and workdir say (see the module docstring)."""
    out: dict[str, Any] = {"status": job.status, "wall_s": round(job.wall_s, 1)}
    setup = next((t for t, line in job.lines if TRAINING.search(line)), None)
    out["setup_s"] = None if setup is None else round(setup, 1)
    progress = [
        (t, int(m[1]), int(m[2]), float(m[3]))
        for t, line in job.lines
        if (m := PROGRESS.search(line))
    ]
    if progress:
        t_first, k, total, rate = progress[0]
        steady = statistics.median([r for *_, r in progress[1:]]) if len(progress) > 1 else rate
        out["steps"] = f"{progress[-1][1]}/{total}"
        out["steps_per_s"] = round(steady, 2)
        out["first_step_s"] = round(t_first - (k - 1) / max(steady, 1e-9), 1)
        out["report_s"] = round(job.wall_s - progress[-1][0], 1)
    else:
        out["steps"] = "not measured: no progress line"
    compiled = next((line for _, line in job.lines if COMPILED.search(line)), None)
    out["compiled_line"] = compiled or "not measured: no 'Compiled:' line"
    out["bleu"] = read_bleu(workdir)
    out["compile"] = read_compile_log(workdir)
    return out


def read_bleu(workdir: Path) -> dict[str, Any] | str:
    path = workdir / "eval_report.json"
    if not path.is_file():
        return "not measured: no eval_report.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    return {k: report.get(k) for k in ("bleu", "chrf", "split", "beam_size", "num_sentences")}


def read_compile_log(workdir: Path) -> dict[str, Any] | str:
    """The launch's programs (the last line of compile_log.jsonl: a fresh workdir has one)."""
    path = workdir / "compile_log.jsonl"
    if not path.is_file():
        return "not measured: no compile_log.jsonl (the launch did not end)"
    record = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
    by_kind: dict[str, float] = {}
    for p in record["programs"]:
        by_kind[p["kind"]] = round(by_kind.get(p["kind"], 0.0) + p["seconds"], 3)
    return {
        "seconds": record["seconds"],
        "programs": len(record["programs"]),
        "cached": record["cached"],
        # compiled in `precompile`'s thread while the run went on (older logs: none)
        "background_s": round(
            sum(p["seconds"] for p in record["programs"] if p.get("background")), 3
        ),  # fmt: skip
        "seconds_by_kind": by_kind,
        "count_by_kind": {k: sum(p["kind"] == k for p in record["programs"]) for k in by_kind},
        "table": record["programs"],
    }
