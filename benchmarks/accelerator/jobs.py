"""One measurement in its own process, with a time limit: its lines, when each came, its JSON.

    job = jobs.run("speed", [sys.executable, "-m", ...], timeout_s=150, log_dir=out / "logs")
    job.status            # "ok" | "timed out after 150 s" | "failed (exit 1): <last line>"
    job.lines             # [(seconds since the start, line)], stdout and stderr together

A hung compile cannot eat the check's budget: at its limit the job's whole process group
(pytest's workers, a launcher's children) gets SIGTERM, then SIGKILL 3 s later, and the
check goes on with the next stage. Each line is timestamped as it arrives (the end-to-end
runs read their time to the first step from that) and written to `<log_dir>/<name>.log`.
A worker that writes its results as it goes (`write_partial`) leaves them behind when it is
cut off (`read_partial`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Job:
    name: str
    argv: list[str]
    timeout_s: float
    wall_s: float
    returncode: int | None  # None: stopped at its time limit
    lines: list[tuple[float, str]]
    log: Path

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def status(self) -> str:
        if self.timed_out:
            return f"timed out after {self.timeout_s:.0f} s"
        if self.returncode:
            last = next((line for _, line in reversed(self.lines) if line.strip()), "")
            return f"failed (exit {self.returncode}): {last.strip()[:200]}"
        return "ok"

    def summary(self) -> dict[str, Any]:
        """For the JSON report."""
        return {
            "status": self.status,
            "wall_s": round(self.wall_s, 1),
            "timeout_s": round(self.timeout_s),
            "log": str(self.log),
        }


def environment(**extra: str) -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH (a GPU machine's
    /tmp/site wheels stay behind it) and unbuffered output, plus `extra` ("" removes a key)."""
    env = dict(os.environ)
    path = [str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONIOENCODING"] = "utf-8"  # what `run` reads, whatever the locale
    for key, value in extra.items():
        if value == "":
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run(
    name: str,
    argv: list[str],
    *,
    timeout_s: float,
    log_dir: Path,
    env: dict[str, str] | None = None,
) -> Job:
    """Runs `argv` in the repository root until it ends or `timeout_s` passes."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    lines: list[tuple[float, str]] = []
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as sink:
        sink.write(f"$ {' '.join(argv)}\n")
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env or environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,  # its own process group: stopped whole at the limit
        )

        def read() -> None:
            for line in process.stdout:
                t = time.perf_counter() - start
                lines.append((t, line.rstrip("\n")))
                sink.write(f"[{t:7.1f}s] {line}")
                sink.flush()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            returncode: int | None = process.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            returncode = None
            _stop(process)
        wall = time.perf_counter() - start
        reader.join(timeout=5)
    return Job(name, argv, timeout_s, wall, returncode, lines, log)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the job's process group, then SIGKILL to what is left of it after 3 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=3.0)
        except subprocess.TimeoutExpired:
            pass


def write_partial(path: str | Path, results: dict[str, Any]) -> None:
    """Writes a worker's results so far (atomically: a reader never sees half a file)."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def read_partial(path: str | Path) -> dict[str, Any] | None:
    """What a worker wrote, or None."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
