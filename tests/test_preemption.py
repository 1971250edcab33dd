"""Preemption (`training/preemption.py`): SIGTERM or SIGINT saves a checkpoint after the step
in flight and stops with one line and exit code 75; the same command resumes bit for bit;
a second signal ends the process at once. Real signals, sent to real processes."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import REPO, flat_params, subprocess_env
from tests.tiny_run import tiny_command
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.training import preemption
from transformer_jax.workdir import history


def test_the_first_signal_is_recorded_and_the_handlers_are_put_back(capfd):
    def previous(signum, frame):  # a caller's own handler (a notebook, a test runner)
        raise AssertionError("not called while the run's handlers are installed")

    old = signal.signal(signal.SIGTERM, previous)
    old_int = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN under xdist
    try:
        stop = preemption.StopSignals.install()
        assert stop.requested(1, every=1) is None
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal; Python runs the handler next
        assert stop.requested(2, every=1) == "SIGTERM"
        # A second one would now get the OS default: the process ends at once.
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL
        stop.restore()
        assert signal.getsignal(signal.SIGTERM) is previous
        assert signal.getsignal(signal.SIGINT) is old_int
    finally:
        signal.signal(signal.SIGTERM, old)
    assert "SIGTERM received: stopping after this step" in capfd.readouterr().err


def test_outside_the_main_thread_no_handler_is_installed(caplog):
    caplog.set_level(logging.INFO, logger="absl")
    before = signal.getsignal(signal.SIGTERM)
    stops = []
    thread = threading.Thread(target=lambda: stops.append(preemption.StopSignals.install()))
    thread.start()
    thread.join()
    stops[0].restore()
    assert signal.getsignal(signal.SIGTERM) is before
    assert "outside the main thread" in caplog.text


def test_a_second_signal_ends_the_process_at_once_even_inside_a_long_call():
    code = """
        import time
        from transformer_jax.training.preemption import StopSignals
        stop = StopSignals.install()
        print("ready", flush=True)
        while stop.received is None:
            time.sleep(0.01)
        print("stopping", flush=True)
        sum(range(10**12))  # a long call in C, as an XLA compile: no Python handler runs
        """
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(signal.SIGINT)
        assert process.stdout.readline().strip() == "stopping"
        start = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
        assert time.perf_counter() - start < 2.0
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGTERM


# --- a real run, stopped twice, ends bitwise equal to an uninterrupted one -------------------

STEPS = 60
# Checkpoints at 20, 40, 60: the first stop comes before any, the second after one.
EXTRA = ("--config.eval_every_steps=60", "--config.checkpoint_every_steps=20")


def _stop_after(workdir: Path, step: int, signum: signal.Signals) -> tuple[str, int, float]:
    """Starts the run, sends `signum` once it logged `step`; (output, exit code, seconds
    from the signal to the exit)."""
    process = subprocess.Popen(
        tiny_command(workdir, STEPS, *EXTRA),
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            logged = re.search(rf"\] step (\d+)/{STEPS} ", line)
            if logged and int(logged.group(1)) >= step:
                break
        start = time.perf_counter()
        process.send_signal(signum)
        lines.append(process.stdout.read())
        process.wait(timeout=120)
        return "".join(lines), process.returncode, time.perf_counter() - start
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_sigterm_and_sigint_save_and_the_same_command_resumes_bitwise(tmp_path):
    reference = subprocess.Popen(  # the uninterrupted run, beside the stopped one
        tiny_command(tmp_path / "reference", STEPS, *EXTRA),
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    workdir = tmp_path / "stopped"
    saved = []
    for after, signum in ((5, signal.SIGTERM), (25, signal.SIGINT)):
        output, code, seconds = _stop_after(workdir, after, signum)
        assert code == preemption.EXIT_CODE, output[-4000:]
        assert "Traceback" not in output, output[-4000:]
        name = signal.Signals(signum).name
        (line,) = [x for x in output.splitlines() if x.startswith("Stopped by")]
        match = re.fullmatch(
            rf"Stopped by {name}: saved step (\d+); re-run the same command to resume\.", line
        )
        assert match, line
        saved.append(int(match.group(1)))
        assert (workdir / "checkpoints" / match.group(1)).is_dir()
        assert not (workdir / ".lock").exists()
        print(f"{name} after step {saved[-1]}: exited {seconds:.2f} s after the signal")
        if len(saved) == 2:
            assert f"Resumed from step {saved[0]} " in output, output[-4000:]
    assert saved[0] < 20 < saved[1] < 40, saved  # before the first checkpoint, then after one

    result = subprocess.run(
        tiny_command(workdir, STEPS, *EXTRA),
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"Resumed from step {saved[1]} " in result.stderr
    _, errors = reference.communicate(timeout=300)
    assert reference.returncode == 0, errors[-4000:]

    np.testing.assert_array_equal(flat_params(workdir), flat_params(tmp_path / "reference"))
    trained = [r["step"] for r in history.read_metrics(workdir) if r["split"] == "train"]
    assert trained == list(range(1, STEPS + 1))  # each step logged once


def test_sigterm_outside_the_loop_is_a_recorded_interrupt_and_the_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with preemption.sigterm_interrupts() as outside:
            assert outside.received is None
            os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler next: it raises
            time.sleep(5)  # not reached
    assert outside.received == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_sigterm_during_the_closing_report_is_one_line_and_exit_75(tmp_path):
    """Killed with SIGTERM's default action, the launcher ended with 143 and no word; the
    model is saved, so it is a preemption: one line, exit 75, and the re-run writes the
    report."""
    workdir = tmp_path / "run"
    subprocess.run(tiny_command(workdir, 4), cwd=REPO, env=subprocess_env(), check=True,
                   capture_output=True)  # fmt: skip
    report = (*tiny_command(workdir, 4), "--config.eval.num_test_examples=32")
    process = subprocess.Popen(
        report, cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if "Final validation" in line:  # the report comes next: decoders to compile
                break
        process.send_signal(signal.SIGTERM)
        lines.append(process.stdout.read())
        process.wait(timeout=120)
    finally:
        process.kill()
        process.wait()
    output = "".join(lines)
    assert process.returncode == preemption.EXIT_CODE, output[-3000:]
    # Most often in the report, else in the moment between the loop's end and it.
    assert output.strip().splitlines()[-1] in (
        "Stopped by SIGTERM during the closing report: nothing was lost; the report is not "
        "written: re-run the same command to write it.",
        "Stopped by SIGTERM outside the training loop: nothing was lost; re-run the same "
        "command to go on.",
    ), output[-3000:]
    assert not (workdir / "eval_report.md").exists()
    again = subprocess.run(report, cwd=REPO, env=subprocess_env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (workdir / "eval_report.md").is_file()


# Started in a terminal (the pty's slave its controlling terminal, the session's leader), then
# the terminal closes: the kernel sends SIGHUP and every later write to it fails (EIO).
IN_A_TERMINAL = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_a_closed_terminal_saves_a_checkpoint_and_exits_75(tmp_path):
    """A run started in an ssh session without nohup or tmux: the session closes. SIGHUP's
    default ended the run at once, losing the steps since the last checkpoint (here all of
    them: the first periodic save is at step 1,000)."""
    import pty

    workdir = tmp_path / "run"
    command = tiny_command(workdir, 400, "--config.checkpoint_every_steps=1000")
    try:
        master, slave = pty.openpty()
    except OSError as error:  # a machine without pseudo-terminals (/dev/ptmx)
        pytest.skip(f"no pseudo-terminal here: {error}")
    process = subprocess.Popen(
        [sys.executable, "-c", IN_A_TERMINAL, *command[1:]],
        cwd=REPO,
        env=subprocess_env(),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,  # its own session, which the terminal becomes the ctty of
    )
    os.close(slave)
    output = b""
    try:
        while not re.search(rb"\] step (\d+)/400 ", output):
            chunk = os.read(master, 65536)  # the run's terminal output
            assert chunk, output[-3000:]
            output += chunk
        os.close(master)  # the terminal closes: SIGHUP, and its writes fail from now on
        code = process.wait(timeout=120)
    finally:
        process.kill()
        process.wait()
    assert code == preemption.EXIT_CODE, (code, output[-3000:])
    steps = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert len(steps) == 1 and 1 <= steps[0] < 400, steps  # saved where it stopped
    assert not (workdir / ".lock").exists()


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_a_run_started_under_nohup_keeps_ignoring_sighup():
    """nohup sets SIGHUP to SIG_IGN so that the run outlives its terminal: it must train on
    when the terminal closes, and stay so after another signal asked it to stop."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    old_term = signal.getsignal(signal.SIGTERM)
    try:
        stop = preemption.StopSignals.install()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing recorded
        assert stop.requested(1, every=1) is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested(2, every=1) == "SIGTERM"
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN  # not reset to the default
        stop.restore()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
        signal.signal(signal.SIGTERM, old_term)
