"""One trainer per workdir (`workdir/lock.py`): a second one is refused at once,
naming the holder; a dead holder's lock is taken over; the lock leaves no trace behind."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import FLAGS, REPO, subprocess_env
from transformer_jax.workdir import lock as workdir_lock
from transformer_jax.workdir.lock import WorkdirLockedError


def _holder(workdir: Path) -> subprocess.Popen:
    """Another process that holds the workdir's lock until it is killed."""
    code = f"""
        import time
        from transformer_jax.workdir import lock as workdir_lock
        with workdir_lock.hold({str(workdir)!r}):
            print("held", flush=True)
            time.sleep(600)
        """
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    line = process.stdout.readline()
    assert line.strip() == "held", line + process.communicate(timeout=60)[0]
    return process


def test_a_second_trainer_is_refused_at_once_naming_the_holder(tmp_path):
    workdir = tmp_path / "run"
    holder = _holder(workdir)
    try:
        start = time.perf_counter()
        with pytest.raises(WorkdirLockedError) as error:
            with workdir_lock.hold(workdir):
                pass
        elapsed = time.perf_counter() - start
        message = str(error.value)
        assert f"PID {holder.pid} on host {socket.gethostname()}" in message, message
        assert "another --workdir" in message and "\n" not in message
        assert elapsed < 1.0, elapsed
        assert (workdir / workdir_lock.LOCK_FILE).is_file()  # the holder's file stays
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_dead_holder_is_taken_over(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="absl")
    workdir = tmp_path / "run"
    holder = _holder(workdir)
    holder.send_signal(signal.SIGKILL)  # no chance to delete its lock file
    holder.wait()
    lock = workdir / workdir_lock.LOCK_FILE
    assert json.loads(lock.read_text())["pid"] == holder.pid
    with workdir_lock.hold(workdir):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
        with workdir_lock.hold(workdir):  # re-entrant in one process (launcher, then library)
            pass
        assert lock.is_file()
    assert f"from PID {holder.pid}" in caplog.text and "no longer running" in caplog.text
    assert not lock.exists()  # deleted on release
    assert workdir.is_dir()  # it existed before: kept


def test_a_workdir_created_for_the_lock_is_removed_if_nothing_was_written(tmp_path):
    with workdir_lock.hold(tmp_path / "empty"):
        assert (tmp_path / "empty" / workdir_lock.LOCK_FILE).is_file()
    assert not (tmp_path / "empty").exists()  # a refused start leaves no trace
    with workdir_lock.hold(tmp_path / "used"):
        (tmp_path / "used" / "config.json").write_text("{}")
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["config.json"]


def test_a_file_unlinked_by_a_releasing_holder_is_not_locked(tmp_path, monkeypatch):
    # The race the inode check closes: we open the file, its holder deletes it and unlocks,
    # we lock the deleted file while a third starter creates and locks a new one.
    workdir = tmp_path / "run"
    workdir.mkdir()
    lock = workdir / workdir_lock.LOCK_FILE
    real_flock, calls = workdir_lock.fcntl.flock, []

    def flock(handle, operation):
        if not calls:  # the first open file is replaced before we lock it
            os.replace(workdir / "other", lock)
        calls.append(os.fstat(handle).st_ino)
        return real_flock(handle, operation)

    (workdir / "other").write_text("")
    monkeypatch.setattr(workdir_lock.fcntl, "flock", flock)
    with workdir_lock.hold(workdir):
        assert calls[-1] == os.stat(lock).st_ino  # the lock is on the file at the path
        assert len(calls) == 2  # the first try locked a replaced file and was retried


@pytest.mark.slow
def test_the_launcher_refuses_a_locked_workdir_in_one_line(tmp_path):
    workdir = tmp_path / "run"
    holder = _holder(workdir)
    try:
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "experiments.train", f"--workdir={workdir}", *FLAGS],
            cwd=REPO,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        elapsed = time.perf_counter() - start
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2, result.stderr[-3000:]
    fatal = [line for line in result.stderr.splitlines() if line.startswith("FATAL:")]
    assert len(fatal) == 1 and f"PID {holder.pid}" in fatal[0], result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Data:" not in result.stderr
    print(f"a second trainer's command was refused in {elapsed:.1f} s (process start included)")


def test_readers_of_a_workdir_whose_trainer_has_not_saved_yet_are_told_to_wait(tmp_path):
    """A trainer's first seconds: the workdir holds its lock (then config.json) and no
    checkpoint. Readers said the run had lost its config.json, or to re-run the command
    that made it (which would meet the lock); now: it is being trained, wait."""
    from transformer_jax.workdir.checkpoints import NoCheckpointError, load_config, load_run

    workdir = tmp_path / "run"
    holder = _holder(workdir)
    wait = "and has no checkpoint yet: wait for its first save"
    try:
        (workdir / "checkpoints").mkdir()  # created before config.json is written
        with pytest.raises(NoCheckpointError, match=wait) as error:
            load_config(workdir)
        assert f"{workdir} is being trained (PID {holder.pid} on host" in str(error.value)
        (workdir / "checkpoints").rmdir()
        (workdir / "config.json").write_text(json.dumps({"model": {}, "data": {}}))
        with pytest.raises(NoCheckpointError, match=wait):
            load_run(workdir)  # config.json written, no checkpoint yet
        assert workdir_lock.trainer_in(workdir).startswith(f"PID {holder.pid} ")
    finally:
        holder.kill()
        holder.wait()
    # Killed with -9, its file stays, naming a dead PID: the usual message again.
    assert workdir_lock.trainer_in(workdir) is None
    with pytest.raises(NoCheckpointError, match="Train one by re-running the command"):
        load_run(workdir)
