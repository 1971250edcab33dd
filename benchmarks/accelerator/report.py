"""The accelerator check's JSON report: its four stages made from the jobs' results, and
the machine it ran on.

`stages(results)` turns {job: result} (what `accelerator_check`'s jobs returned, or
{"not_run": "not measured: why"}) into {"programs", "speed", "end_to_end", "tests"}, each
value numbers or "not measured: why".
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from typing import Any

from benchmarks.accelerator import jobs, table

REPO = jobs.REPO


def stages(results: dict[str, dict]) -> dict[str, Any]:
    """The four stages of the report from the jobs' results; where a job did not run or
    did not give a value, the value is "not measured: why"."""

    def why(job: str) -> str:
        r = results[job]
        return r.get("not_run") or r.get("result") or f"not measured: {r['status']}"

    def part(job: str, key: str) -> Any:  # one value of a job's result
        return results[job].get(key) or why(job)

    def whole(job: str, key: str) -> Any:  # the job's result, if it holds `key`
        return results[job] if key in results[job] else why(job)

    programs: dict[str, Any] = {
        k: part(k, "compile") for k in ("readme", "readme_cached", "readme_inline", "deep_sampled")
    }
    first, second = programs["readme"], programs["readme_cached"]
    if isinstance(first, dict) and isinstance(second, dict):
        programs["cache"] = {
            "first_s": first["seconds"],
            "second_s": second["seconds"],
            "ratio": second["seconds"] / max(first["seconds"], 1e-9),
        }
    else:
        programs["cache"] = "not measured: needs both README launches' compile logs"
    programs["compile_vs_flax_wmt"] = whole("compile", "sizes")
    return {
        "programs": programs,
        "speed": {"base": whole("speed", "impls"), "readme": whole("gradients", "impls")},
        "end_to_end": {k: whole(k, "wall_s") for k in table.RUNS},
        "tests": whole("tests", "counts"),
        "flags": whole("flags", "variants"),
    }


def environment_info() -> dict[str, Any]:
    """Device, versions, commit. The device is asked in a child process: this one holds no
    accelerator while the jobs run (a TPU admits one process)."""
    probe = (
        "import json, jax; d = jax.devices(); "
        "print(json.dumps([d[0].device_kind, jax.default_backend(), len(d)]))"
    )
    child = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        env=jobs.environment(),
        encoding="utf-8",
        errors="replace",
        timeout=120,
        check=False,
    )
    try:
        kind, backend, n = json.loads(child.stdout.strip().splitlines()[-1])
        device = f"{kind} ({backend}, {n} device{'s' * (n > 1)})"
    except (ValueError, IndexError):
        device = f"unknown ({child.stderr.strip()[-300:]})"
    versions = {}
    for package in ("jax", "jaxlib", "flax", "optax", "torch"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    try:
        argv = ["git", "rev-parse", "--short", "HEAD"]
        git = subprocess.run(
            argv, cwd=REPO, capture_output=True, encoding="utf-8", errors="replace"
        ).stdout.strip()
    except OSError:  # no git on the machine
        git = ""
    return {
        "device": device,
        "jax_version": versions["jax"],
        "versions": versions,
        "python": sys.version.split()[0],
        "git_commit": git or "unknown (no git here)",
        "env": {k: os.environ.get(k, "") for k in ("XLA_FLAGS", "XLA_PYTHON_CLIENT_PREALLOCATE")},
    }
