"""Faults of the sweep runner (transformer_jax/sweeps, experiments/sweep.py) and of the
`--workdir` reading its point directories need: a comma in a point's name, interrupts,
two sweeps on one folder, the results of resumed, failed and non-finite points, damaged
sweep files, --extra flags the train launcher does not take, an empty sweep."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax import sweeps
from transformer_jax.inference.run_specs import split_workdirs
from transformer_jax.sweeps.points import DONE_FILE, FAILED_FILE, LOG_FILE
from transformer_jax.workdir.checkpoints import NoCheckpointError

# --- 1. a comma in a workdir's name -------------------------------------------------------


def test_a_directory_whose_name_has_commas_is_one_run_and_ensembles_still_work(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    for name in ("a", "b", "x=1,y=2", "x=1", "p,q", "q,r", "p", "r"):
        Path(name).mkdir()
    assert split_workdirs("x=1,y=2") == ["x=1,y=2"]  # commas and all
    assert split_workdirs("x=1,y=2@4") == ["x=1,y=2@4"]
    assert split_workdirs(Path("a,b")) == ["a,b"]  # code holding one workdir: never cut
    assert split_workdirs("a,b") == ["a", "b"] and split_workdirs(" a@2, b ") == ["a@2", "b"]
    assert split_workdirs("x=1,y=2,x=1,y=2@3") == ["x=1,y=2", "x=1,y=2@3"]  # two sweep points
    assert split_workdirs("x=1,y=2,a") == ["x=1,y=2", "a"]
    with pytest.raises(NoCheckpointError, match=r"--workdir=a,nope: no such directory, and as"):
        split_workdirs("a,nope")
    with pytest.raises(ValueError, match=r"reads two ways"):  # p + "q,r" or "p,q" + r
        split_workdirs("p,q,r")
    assert split_workdirs("p, q,r") == ["p", "q,r"]  # ", " separates


def test_a_run_in_a_workdir_with_commas_reports_translates_and_evaluates(tiny_workdir, tmp_path):
    from transformer_jax.evaluation.report import test_report
    from transformer_jax.evaluation.translate_cli import first_workdir
    from transformer_jax.inference import load_translator

    workdir = tmp_path / "norm_placement=pre,attention_kind=dot"
    shutil.copytree(tiny_workdir, workdir)
    assert first_workdir(str(workdir)) == str(workdir)
    assert load_translator(str(workdir)).translate(["go ."], beam_size=1)
    # The train launcher's closing report holds the --workdir string.
    report = test_report(str(workdir), 2)
    assert report["workdir"] == str(workdir) and (workdir / "eval_report.md").is_file()


# --- 2. interrupting a sweep --------------------------------------------------------------

# A stand-in trainer that saves as experiments.train does on SIGINT/SIGTERM: slowly (longer
# than the 0.25 s subprocess.run grants), then exit 75.
TRAINER = textwrap.dedent(
    """
    import os, signal, sys, time
    out = sys.argv[1]

    def stop(signum, frame):
        time.sleep(1.0)  # writing the checkpoint
        open(os.path.join(out, "saved"), "w").write(signal.Signals(signum).name)
        sys.exit(75)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    open(os.path.join(out, "pid"), "w").write(str(os.getpid()))
    print("step 1", flush=True)
    time.sleep(60)
    """
)

# The sweep as experiments.sweep runs it (run_sweep, SweepInterrupted's line and exit code),
# over one point whose "training" is TRAINER.
DRIVER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from transformer_jax import sweeps

    out = Path(sys.argv[1])
    point = sweeps.SweepPoint(
        "a=1", {"a": 1}, out / "a=1", [sys.executable, str(out / "trainer.py"), str(out)]
    )
    print("ready", flush=True)
    try:
        sweeps.run_sweep([point], log=lambda line: None)
    except sweeps.SweepInterrupted as stop:
        print(stop, file=sys.stderr)
        sys.exit(stop.exit_code)
    """
)


def _start_sweep(tmp_path):
    (tmp_path / "trainer.py").write_text(TRAINER)
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path)],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.time() + 120
    while not (tmp_path / "pid").exists():  # the trainer runs and has its handlers
        assert driver.poll() is None and time.time() < deadline, driver.communicate()
        time.sleep(0.1)
    return driver, int((tmp_path / "pid").read_text())


def _gone(pid: int, within: float) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("how", ["ctrl_c", "sigterm", "sighup"])
def test_a_stopped_sweep_lets_its_trainer_save_and_records_nothing_as_failed(tmp_path, how):
    driver, child = _start_sweep(tmp_path)
    if how == "ctrl_c":  # a terminal's Ctrl-C: SIGINT to the foreground process group
        os.killpg(driver.pid, signal.SIGINT)
    elif how == "sighup":  # the terminal closed: SIGHUP to its session's processes
        os.killpg(driver.pid, signal.SIGHUP)
    else:  # `kill PID` of the sweep alone
        driver.send_signal(signal.SIGTERM)
    _, stderr = driver.communicate(timeout=60)
    name = {"ctrl_c": "SIGINT", "sigterm": "SIGTERM", "sighup": "SIGHUP"}[how]
    assert driver.returncode == 75, stderr
    assert stderr.strip() == (
        f"Stopped by {name} during point a=1 (its checkpoint saved); re-run the same command "
        "to resume."
    )
    assert (tmp_path / "saved").read_text() == name and _gone(child, 5)
    assert not (tmp_path / "a=1" / FAILED_FILE).exists()
    assert not (tmp_path / "a=1" / DONE_FILE).exists()


def test_a_second_signal_stops_the_trainer_at_once(tmp_path):
    driver, child = _start_sweep(tmp_path)
    driver.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the trainer is "saving"
    driver.send_signal(signal.SIGTERM)
    _, stderr = driver.communicate(timeout=60)
    assert driver.returncode == 128 + signal.SIGKILL, stderr
    assert "during point a=1 (its trainer exited 137)" in stderr and _gone(child, 5)
    assert not (tmp_path / "saved").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_sweep_takes_its_trainer_with_it(tmp_path):
    driver, child = _start_sweep(tmp_path)
    driver.kill()
    driver.communicate(timeout=60)
    assert _gone(child, 10), "the trainer outlived its sweep"
    assert (tmp_path / "saved").read_text() == "SIGTERM"  # told to save, as on preemption


# --- 3. two sweeps on one folder; whose error is recorded ----------------------------------


def _point(tmp_path, name="a=1", command=()):
    return sweeps.SweepPoint(name, {"a": 1}, tmp_path / "s" / name, list(command))


def test_a_second_sweep_on_the_same_folder_is_refused_before_running(tmp_path):
    point = _point(tmp_path)
    calls = []
    (tmp_path / "s").mkdir()
    with sweeps.lock.hold(tmp_path / "s"):  # the first sweep, running
        with pytest.raises(sweeps.SweepLockedError, match=r"s is in use by another sweep \(PID"):
            sweeps.run_sweep([point], log=print, run_point=lambda p, log: calls.append(p))
    assert calls == [] and not point.workdir.exists()
    sweeps.run_sweep([point], log=print, run_point=lambda p, log: calls.append(p))
    assert calls == [point] and point.done  # the lock went with its holder


def test_a_point_that_succeeds_leaves_no_failed_record(tmp_path):
    point = _point(tmp_path)

    def run(p, log_path):  # e.g. written by another process meanwhile
        (p.workdir / FAILED_FILE).write_text('{"error": "old"}')

    sweeps.run_sweep([point], log=print, run_point=run)
    assert point.done and not (point.workdir / FAILED_FILE).exists()


def test_the_recorded_error_is_this_attempts_fatal_line_not_the_logs_last_line(tmp_path):
    log = tmp_path / "s" / "a=1" / LOG_FILE
    script = (  # another process appends to the same log after the FATAL line
        "import sys; print('FATAL: the real reason', flush=True); "
        f"open({str(log)!r}, 'a').write('step 99: loss 1.0\\n'); sys.exit(2)"
    )
    point = _point(tmp_path, command=[sys.executable, "-c", script])
    sweeps.run_sweep([point], log=print)
    assert point.failure == f"exit 2: FATAL: the real reason (log: {log})"


# --- 4. results of resumed, failed and non-finite points -----------------------------------


def test_the_wall_time_of_a_resumed_point_is_the_sum_of_its_attempts(tmp_path):
    point = _point(tmp_path)
    attempts = []

    def run(p, log_path):
        attempts.append(p)
        time.sleep(0.3)
        if len(attempts) == 1:
            raise sweeps.SweepInterrupted("SIGINT", 75)

    with pytest.raises(sweeps.SweepInterrupted, match="during point a=1 .its checkpoint saved"):
        sweeps.run_sweep([point], log=print, run_point=run)
    assert point.failure is None and not point.done  # stopped, not failed
    sweeps.run_sweep([point], log=print, run_point=run)
    (row,) = sweeps.gather([point], tmp_path / "s")
    assert row["wall_time_s"] >= 0.6 and row["attempts"] == 2


def test_the_plot_leaves_out_missing_values_and_marks_non_finite_ones(tmp_path):
    from transformer_jax.sweeps import results

    rows = [
        {"point": "a", "eval_loss": 1.5},
        {"point": "b", "eval_loss": None},  # failed or not started
        {"point": "c", "eval_loss": float("nan")},
        {"point": "d", "eval_loss": float("inf")},
    ]
    assert results.bars(rows, "eval_loss") == (
        [0],
        [1.5],
        ["a", "b (no value)", "c (nan)", "d (inf)"],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from a NaN bar
        results.plot([{**r, "bleu": r["eval_loss"]} for r in rows], tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


# --- 5. damaged sweep files -----------------------------------------------------------------


def test_an_unreadable_done_record_runs_the_point_again_with_a_warning(tmp_path):
    point = _point(tmp_path)
    point.workdir.mkdir(parents=True)
    (point.workdir / DONE_FILE).write_text("")  # e.g. a full disk
    (point.workdir / FAILED_FILE).write_text("{garbage")
    assert not point.done and "unreadable" in point.failure
    logged, calls = [], []
    sweeps.run_sweep([point], log=logged.append, run_point=lambda p, log: calls.append(p))
    assert calls == [point] and point.done
    assert logged[0] == (
        f"[1/1] a=1: warning: {point.workdir / DONE_FILE} is unreadable, so the point runs again"
    )
    (row,) = sweeps.gather([point], tmp_path / "s")
    assert row["status"] == "done"


CONFIG = textwrap.dedent(
    """
    import ml_collections

    def get_config(arg=None):
        return ml_collections.ConfigDict({"seed": 0, "model": {"size": 2}})

    def get_hyper(h, name):
        if name == "empty":
            return []
        return h.sweep("model.size", [1, 2])
    """
)


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text(CONFIG)
    return path


def test_a_garbage_saved_config_is_one_error_naming_the_file(config_file, tmp_path):
    points = sweeps.sweep_points(str(config_file), "sizes", tmp_path / "s")
    points[1].workdir.mkdir(parents=True)
    (points[1].workdir / "config.json").write_text("{garbage")
    with pytest.raises(sweeps.SweepError) as error:
        sweeps.check_saved_configs(points)
    message = str(error.value)
    assert message.startswith(f"{points[1].workdir / 'config.json'} is unreadable (Expecting")
    assert f"delete the workdir {points[1].workdir} to run point size=2 again" in message


def test_a_sweep_dir_that_is_a_file_and_a_results_file_that_is_a_folder_are_refused(
    config_file, tmp_path
):
    (tmp_path / "file").write_text("x")
    for sweep_dir in (tmp_path / "file", tmp_path / "file" / "below"):
        with pytest.raises(sweeps.SweepError, match=r"--sweep_dir=.*file.* a file, not a dir"):
            sweeps.sweep_points(str(config_file), "sizes", sweep_dir)
    sweep_dir = tmp_path / "s"
    (sweep_dir / "results.md").mkdir(parents=True)
    with pytest.raises(sweeps.SweepError, match=r"results.md is not a file, so the sweep's"):
        sweeps.check_result_paths(sweep_dir)
    points = sweeps.sweep_points(str(config_file), "sizes", sweep_dir)
    with pytest.raises(sweeps.SweepError, match=r"Cannot write .*results.md \(Is a directory\)"):
        sweeps.gather(points, sweep_dir)


# --- 6. --extra flags the train launcher does not take ------------------------------------


def test_extra_flags_are_checked_against_the_train_launcher_before_anything_runs(tmp_path):
    spec = "configs/fra_eng.py:runlocal"
    with pytest.raises(sweeps.SweepError, match=r"one --flag=value, e.g. --extra=--config.num"):
        sweeps.sweep_points(spec, "norm_placement", tmp_path, ["--config.num_train_steps 5"])
    bad = sweeps.sweep_points(spec, "norm_placement", tmp_path, ["--bogus=1"])
    with pytest.raises(sweeps.SweepError) as error:
        sweeps.check_launcher_flags(bad, ["--bogus=1"])
    assert str(error.value).startswith(
        "--extra: the train launcher refuses its flags: Unknown command line flag 'bogus'"
    )
    good = ["--compilation_cache_dir=/tmp/c", "--noprint_config"]  # ones the launcher takes
    sweeps.check_launcher_flags(sweeps.sweep_points(spec, "norm_placement", tmp_path, good), good)
    assert not any(tmp_path.iterdir())  # nothing ran


# --- 7. an empty sweep ----------------------------------------------------------------------


def test_an_empty_sweep_is_one_error_naming_it(config_file, tmp_path):
    with pytest.raises(sweeps.SweepError, match=r"Sweep 'empty' of .*cfg.py has no points"):
        sweeps.sweep_points(str(config_file), "empty", tmp_path)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_a_sweep_started_under_nohup_keeps_ignoring_sighup():
    from transformer_jax.sweeps.child import SignalGuard

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts it
    try:
        with SignalGuard():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL  # the others caught
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
