"""Locks on a filesystem without flock (Lustre without `-o flock`: ENOSYS; NFS without its
lock daemon: ENOLCK), where flock's OSError ended every start in a traceback. A workdir's
lock file record is the lock: a live trainer named there is refused, a dead one's record
taken over, and the run trains with a warning; data builds and sweeps run unlocked, warned
once."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import subprocess
import sys

import pytest

from tests.helpers import run_module_after
from tests.tiny_run import tiny_command
from transformer_jax.data import locks as data_locks
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.sweeps import lock as sweep_lock
from transformer_jax.workdir import lock as workdir_lock
from transformer_jax.workdir.lock import WorkdirLockedError

NO_FLOCK = """
    import errno, fcntl
    def flock(handle, operation):  # as on Lustre mounted without -o flock
        raise OSError(errno.ENOSYS, "Function not implemented")
    fcntl.flock = flock
"""


@pytest.fixture
def no_flock(monkeypatch):
    def flock(handle, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(workdir_lock.fcntl, "flock", flock)  # one fcntl module for all
    monkeypatch.setattr(data_locks, "_UNLOCKED", set())


def _record(workdir, pid: int, host: str | None = None) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "host": host or socket.gethostname(), "since": 0}
    (workdir / workdir_lock.LOCK_FILE).write_text(json.dumps(record), encoding="utf-8")


def test_the_record_is_the_lock_and_the_run_is_warned(tmp_path, no_flock, caplog):
    caplog.set_level(logging.INFO, logger="absl")
    workdir, lock = tmp_path / "run", tmp_path / "run" / workdir_lock.LOCK_FILE
    with workdir_lock.hold(workdir):
        assert json.loads(lock.read_text(encoding="utf-8"))["pid"] == os.getpid()
        with workdir_lock.hold(workdir):  # re-entrant: the launcher, then the library
            pass
        (workdir / "config.json").write_text("{}", encoding="utf-8")
    assert not lock.exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"{workdir} is on a filesystem without file locks (flock: Function not" in warnings[0]


def test_a_live_trainer_in_the_record_is_refused_and_a_dead_one_taken_over(
    tmp_path, no_flock, caplog
):
    caplog.set_level(logging.INFO, logger="absl")
    workdir, lock = tmp_path / "run", tmp_path / "run" / workdir_lock.LOCK_FILE
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _record(workdir, trainer.pid)
        with pytest.raises(WorkdirLockedError) as refused:
            with workdir_lock.hold(workdir):
                pass
        message = str(refused.value)
        assert f"in use by another trainer (PID {trainer.pid} on host" in message, message
        assert "without file locks (flock: Function not implemented)" in message, message
        assert message.endswith(f"delete {lock}.") and "\n" not in message, message
        assert workdir_lock.trainer_in(workdir).startswith(f"PID {trainer.pid} ")
    finally:
        trainer.kill()
        trainer.wait()
    with workdir_lock.hold(workdir):  # its PID is gone: the record is stale
        assert json.loads(lock.read_text(encoding="utf-8"))["pid"] == os.getpid()
    assert f"from PID {trainer.pid}" in caplog.text and "no longer running" in caplog.text


def test_another_hosts_record_is_taken_at_its_word(tmp_path, no_flock):
    _record(tmp_path / "run", 12345, host="another-host.example")
    with pytest.raises(WorkdirLockedError, match="PID 12345 on host another-host.example"):
        with workdir_lock.hold(tmp_path / "run"):
            pass


def test_other_flock_errors_are_not_taken_for_a_missing_lock(tmp_path, monkeypatch):
    def flock(handle, operation):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(workdir_lock.fcntl, "flock", flock)
    with pytest.raises(OSError, match="Input/output error"):
        with workdir_lock.hold(tmp_path / "run"):
            pass


@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_the_launcher_trains_on_a_filesystem_without_flock(tmp_path):
    result = run_module_after(NO_FLOCK, "experiments.train", *tiny_command(tmp_path / "run", 2)[3:])
    assert result.returncode == 0, result.stderr[-3000:]
    warned = [line for line in result.stderr.splitlines() if "without file locks" in line]
    assert sum(f"{tmp_path / 'run'} is on" in line for line in warned) == 1, warned
    assert all("builds there run without a lock" in line for line in warned[1:]), warned
    assert (tmp_path / "run" / "checkpoints" / "2").is_dir()
    assert not (tmp_path / "run" / workdir_lock.LOCK_FILE).exists()


def test_data_builds_and_sweeps_run_unlocked_warned_once(tmp_path, no_flock, caplog):
    caplog.set_level(logging.INFO, logger="absl")
    done = []
    for name in ("a", "b"):  # two builds in one folder: one warning
        with data_locks.exclusive(tmp_path / "data" / f".{name}.lock", what=f"building {name}"):
            done.append(name)
    with sweep_lock.hold(tmp_path / "sweep"):
        done.append("sweep")
    assert done == ["a", "b", "sweep"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(f"{tmp_path / 'data'} is on a filesystem without file locks")
    assert "a second sweep here is not refused" in warnings[1], warnings
