"""Run every point of a sweep, each in its own workdir, as a separate training process.

Each point is launched with exactly the command `--dry_run` prints (so a cluster
scheduler can run the same lines). Before anything runs, every point's config is resolved
as `experiments.train` will resolve it (the config file, the point's overrides, `--extra`;
`sweeps.points`), and:

- `--extra` may not set a key the sweep varies (`sweeps.points`), nor a flag the train
  launcher does not take (`check_launcher_flags`);
- each resolved config passes the run config validation (`validate_points`);
- a workdir that already holds a run (`config.json`) is reused, finished or resumed, only
  if its saved config equals the point's, so a sweep on another config variant or with
  other `--extra` flags never takes old results for its own (`check_saved_configs`).

A point that fails is recorded in its workdir (`sweep_point_failed.json`: the error in one
line, this attempt's last FATAL line if it printed one) and the sweep goes on with the next;
re-running retries it. One sweep runs in a sweep directory at a time (`sweeps/lock.py`).
SIGINT/SIGTERM stop the running point's trainer the way it saves a checkpoint
(`sweeps/child.py`): nothing is recorded as failed, and re-running resumes it. The wall
time of a point is the sum of its attempts (`sweep_point_time.json`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from transformer_jax.sweeps import lock
from transformer_jax.sweeps.child import SignalGuard, SweepInterrupted, run_child
from transformer_jax.sweeps.points import (
    DONE_FILE,
    FAILED_FILE,
    LOG_FILE,
    SAVED_CONFIG_FILE,
    TIME_FILE,
    TRAIN_CWD,
    TRAIN_MODULE,
    SweepError,
    SweepPoint,
    config_flag_key,
    read_record,
    write_record,
)
from transformer_jax.training.config import run_defaults, validate_config
from transformer_jax.workdir.config_renames import upgrade_saved
from transformer_jax.workdir.resume import config_changes

_MAX_ERROR_CHARS = 300


class PointFailed(RuntimeError):
    """One point's run failed; the message is one line (exit code and the log's last line)."""


def check_launcher_flags(points: list[SweepPoint], extra_flags: list[str]) -> None:
    """Asks the train launcher whether it takes the `--extra` flags that are not config keys
    (`--only_check_args`: absl parses the flags and exits, nothing runs): a flag it does not
    know would fail every point the same way. Raises `SweepError` with its FATAL line."""
    if not points or all(config_flag_key(flag) is not None for flag in extra_flags):
        return  # config keys are checked in-process (`sweep_points`)
    result = subprocess.run(
        [*points[0].command, "--only_check_args"],
        cwd=TRAIN_CWD,
        # Its FATAL line may name a path with any character: written and read as UTF-8.
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        check=False,
    )
    if result.returncode != 0:
        line = _last_line(result.stderr) or _last_line(result.stdout) or f"exit {result.returncode}"
        raise SweepError(
            f"--extra: the train launcher refuses its flags: {line.removeprefix('FATAL: ')} "
            f"(see python -m {TRAIN_MODULE} --helpfull). Nothing was run."
        )


def validate_points(
    points: list[SweepPoint],
    *,
    num_devices: int = 1,
    validate: Callable[..., None] | None = None,
) -> None:
    """Checks every point's run config (`training.config.validate_config`) before any runs.

    Raises `SweepError` listing every invalid point and its error.
    """
    validate = validate or validate_config
    problems = []
    for point in points:
        try:
            validate(point.config, num_devices=num_devices, process_count=1)
        except ValueError as error:
            problems.append(f"  {point.name}: {error}")
    if problems:
        raise SweepError(
            f"{len(problems)} of {len(points)} sweep point configs are invalid (nothing was "
            "run):\n" + "\n".join(problems)
        )


def saved_config_differences(point: SweepPoint) -> list[str] | None:
    """The keys on which `<workdir>/config.json` differs from the point's config, as
    "key: saved -> requested"; [] if equal, None if the workdir holds no saved config."""
    path = point.workdir / SAVED_CONFIG_FILE
    if not path.is_file():
        return None
    try:
        saved = upgrade_saved(json.loads(path.read_text(encoding="utf-8")))
        # A key the saved config lacks (added to the code since) at its default is no change.
        changes = config_changes(saved, point.config, run_defaults())
        return [str(change) for change in changes]
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise SweepError(
            f"{path} is unreadable ({' '.join(str(error).split())}): restore it, or delete the "
            f"workdir {point.workdir} to run point {point.name} again. Nothing was run."
        ) from None


def check_saved_configs(points: list[SweepPoint]) -> None:
    """Refuses to reuse (skip or resume) a point whose workdir holds a run of another config.

    Raises `SweepError` naming each such point and the keys that differ.
    """
    problems = []
    for point in points:
        differences = saved_config_differences(point)
        if differences is None and point.done:
            problems.append(
                f"  {point.name}: finished, but {point.workdir / SAVED_CONFIG_FILE} is missing, "
                "so its config cannot be compared"
            )
        elif differences:
            problems.append(f"  {point.name}: {'; '.join(differences)}")
    if problems:
        raise SweepError(
            f"{len(problems)} sweep point workdir(s) hold runs of another config (saved "
            "config.json -> this sweep's), so their results are not this sweep's:\n"
            + "\n".join(problems)
            + "\nUse another --sweep_dir (the default one names the config and variant), or "
            "delete those workdirs to run them again. Nothing was run."
        )


def run_sweep(
    points: list[SweepPoint],
    *,
    dry_run: bool = False,
    timeout: float | None = None,
    log: Callable[[str], None] = print,
    run_point: Callable[[SweepPoint, Path], None] | None = None,
) -> list[SweepPoint]:
    """Runs unfinished points one after another; returns the points that were run.

    First refuses workdirs holding another config (`check_saved_configs`), then holds the
    sweep directory's lock (`sweeps.lock`: `SweepLockedError` if another sweep runs there).
    A point whose run raises is recorded as failed (`SweepPoint.failure`) and the sweep goes
    on; the caller decides what a failure means (`experiments.sweep` exits non-zero).
    SIGINT/SIGTERM stop the running point as the train launcher stops (its checkpoint
    saved; `sweeps.child`) and raise `SweepInterrupted`: nothing is recorded as failed.
    `run_point(point, log_path)` runs one point (default: its command in a subprocess),
    raising on failure.
    """
    check_saved_configs(points)
    if dry_run:
        for point in points:
            log(shlex.join(point.command))
        return []
    ran: list[SweepPoint] = []
    with contextlib.ExitStack() as stack:
        for sweep_dir in dict.fromkeys(p.workdir.parent for p in points):
            stack.enter_context(lock.hold(sweep_dir))
        guard = stack.enter_context(SignalGuard())
        if run_point is None:

            def run_point(point: SweepPoint, log_path: Path) -> None:
                run_training_process(point, log_path, timeout, guard)

        for i, point in enumerate(points, 1):
            if _run_one(point, f"[{i}/{len(points)}] {point.name}", run_point, log):
                ran.append(point)
    return ran


def _run_one(
    point: SweepPoint, label: str, run_point: Callable[[SweepPoint, Path], None], log: Callable
) -> bool:
    """Runs one point unless it is finished; records how it ended; False if skipped."""
    done_file = point.workdir / DONE_FILE
    if point.done:
        log(f"{label}: finished with this config, skipped")
        return False
    if done_file.exists():  # e.g. emptied by a full disk: its result is unknown
        log(f"{label}: warning: {done_file} is unreadable, so the point runs again")
        done_file.unlink()
    log(f"{label} (log: {point.workdir / LOG_FILE}): {shlex.join(point.command)}")
    point.workdir.mkdir(parents=True, exist_ok=True)
    (point.workdir / FAILED_FILE).unlink(missing_ok=True)
    start = time.time()
    try:
        run_point(point, point.workdir / LOG_FILE)
    except SweepInterrupted as stop:  # saved and resumable: not a failure
        _add_attempt(point, time.time() - start)
        stop.point = point.name
        raise
    except Exception as error:  # noqa: BLE001 - any failure of one point is recorded
        seconds, _ = _add_attempt(point, time.time() - start)
        message = _one_line(error)
        write_record(point.workdir / FAILED_FILE, {"error": message, "seconds": seconds})
        log(f"{label}: FAILED: {message}")
    else:
        seconds, attempts = _add_attempt(point, time.time() - start)
        record = {"overrides": point.overrides, "seconds": seconds, "attempts": attempts}
        write_record(done_file, record)
        (point.workdir / FAILED_FILE).unlink(missing_ok=True)  # one written meanwhile: stale
    return True


def _add_attempt(point: SweepPoint, seconds: float) -> tuple[float, int]:
    """Adds one attempt's seconds to the point's time record; returns (total, attempts)."""
    path = point.workdir / TIME_FILE
    so_far = read_record(path) or {}
    total = round(float(so_far.get("seconds", 0.0)) + seconds, 1)
    attempts = int(so_far.get("attempts", 0)) + 1
    write_record(path, {"seconds": total, "attempts": attempts})
    return total, attempts


def run_training_process(
    point: SweepPoint,
    log_path: Path,
    timeout: float | None = None,
    guard: SignalGuard | None = None,
) -> None:
    """Runs the point's command, appending its output to `log_path` (`sweeps.child`: a
    signal stops it as the train launcher stops, raising `SweepInterrupted`); raises
    `PointFailed` with the exit code and this attempt's last FATAL line (else its last
    line): never a line that another process appended to the log."""
    with open(log_path, "a", encoding="utf-8") as out:
        out.write(f"--- sweep attempt, {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
        out.flush()
        start = out.tell()
        try:
            code = run_child(
                point.command, out, guard or SignalGuard(), cwd=TRAIN_CWD, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise PointFailed(f"timed out after {timeout} s (log: {log_path})") from None
    if code != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            last = _last_fatal_line(f.read())
        raise PointFailed(f"exit {code}: {last or 'no output'} (log: {log_path})")


def _one_line(error: BaseException) -> str:
    text = str(error) if isinstance(error, PointFailed) else f"{type(error).__name__}: {error}"
    line = " ".join(text.split())
    return line if len(line) <= _MAX_ERROR_CHARS else line[: _MAX_ERROR_CHARS - 1] + "…"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _last_fatal_line(text: str) -> str:
    """The last "FATAL: ..." line (the launcher's own words), else the last line."""
    fatal = [line.strip() for line in text.splitlines() if line.startswith("FATAL:")]
    return fatal[-1] if fatal else _last_line(text)
