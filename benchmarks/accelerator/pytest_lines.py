"""What a `pytest -v` job printed: its counts, and the tests that failed.

The accelerator check's tests job (`accelerator_check.job_tests`) runs pytest with -v, so
that each test's outcome is a line as it ends: a job cut off at its time limit still says
how many passed and which failed so far.
"""

from __future__ import annotations

import glob
import re

from benchmarks.accelerator import jobs

REPO = jobs.REPO


def read(job: jobs.Job, files: list[str], patterns: tuple[str, ...]) -> dict:
    """Counts (pytest's summary line; cut off: the `-v` lines so far) and failed tests."""
    outcomes = [  # "tests/a.py::t PASSED" (one process) or "[gw0] [ 5%] PASSED tests/a.py::t"
        (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        for _, ln in job.lines
        if (m := re.search(r"(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)"
                           r"|\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S+::\S+)", ln))
    ]  # fmt: skip
    summary = next((ln for _, ln in reversed(job.lines) if re.search(r" in [\d.]+s", ln)), "")
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary)}
    if not counts and outcomes:  # cut off before the summary: what ended so far
        for word in ("PASSED", "FAILED", "ERROR", "SKIPPED"):
            counts[f"{word.lower()} so far"] = sum(o[1] == word for o in outcomes)
    return {
        "files": files,
        "missing_patterns": [p for p in patterns if not glob.glob(p, root_dir=REPO)],
        "counts": counts or f"not measured: {job.status} (no pytest summary line)",
        "failed": sorted({t for t, o in outcomes if o in ("FAILED", "ERROR")}),
        "summary": summary.strip("= "),
    }
