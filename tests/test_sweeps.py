import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import FLAGS as TINY_RUN
from tests.helpers import REPO, subprocess_env
from transformer_jax import sweeps
from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.points import DONE_FILE, LOG_FILE
from transformer_jax.workdir import checkpoints as ckpt

CONFIG = textwrap.dedent(
    """
    import ml_collections

    def get_config(arg=None):
        c = ml_collections.ConfigDict()
        c.seed = 0
        c.model = ml_collections.ConfigDict(
            {"norm_placement": "post", "attention_kind": "dot", "size": 2}
        )
        c.variant = arg or "default"
        return c

    def get_hyper(h, name):
        if name == "grid":
            return h.product([h.sweep("model.norm_placement", ["post", "pre"]),
                              h.sweep("model.attention_kind", ["dot", "additive"])])
        if name == "one":
            return h.sweep("model.norm_placement", ["pre"])
        if name == "bad_key":
            return h.sweep("model.nope", [1])
        raise h.unknown(name, ["grid", "one", "bad_key"])
    """
)


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text(CONFIG)
    return path


def test_product_zip_and_clash():
    grid = hyper.product([hyper.sweep("a", [1, 2]), hyper.sweep("b", ["x", "y", "z"])])
    assert len(grid) == 6 and grid[0] == {"a": 1, "b": "x"} and grid[-1] == {"a": 2, "b": "z"}
    zipped = hyper.zip([hyper.sweep("a", [1, 2]), hyper.sweep("b", [3, 4])])
    assert zipped == [{"a": 1, "b": 3}, {"a": 2, "b": 4}]
    with pytest.raises(ValueError, match="equal length"):
        hyper.zip([hyper.sweep("a", [1, 2]), hyper.sweep("b", [3])])
    with pytest.raises(ValueError, match=r"sets \['a'\] twice"):
        hyper.product([hyper.sweep("a", [1]), hyper.fixed("a", 2)])


def test_points_commands_and_names(config_file, tmp_path):
    points = sweeps.sweep_points(f"{config_file}:d2l", "grid", tmp_path / "sweep")
    assert [p.name for p in points] == [
        "norm_placement=post,attention_kind=dot",
        "norm_placement=post,attention_kind=additive",
        "norm_placement=pre,attention_kind=dot",
        "norm_placement=pre,attention_kind=additive",
    ]
    cmd = points[3].command
    assert cmd[1:3] == ["-m", "experiments.train"]
    assert f"--config={config_file}:d2l" in cmd
    assert f"--workdir={tmp_path / 'sweep' / points[3].name}" in cmd
    assert "--config.model.norm_placement=pre" in cmd
    assert "--config.model.attention_kind=additive" in cmd


def test_unknown_sweep_and_unknown_key_are_reported(config_file, tmp_path):
    with pytest.raises(ValueError, match="Unknown sweep 'nope'; this config defines: grid, one"):
        sweeps.sweep_points(str(config_file), "nope", tmp_path)
    with pytest.raises(ValueError, match=r"'model.nope' is not a config key; valid here"):
        sweeps.sweep_points(str(config_file), "bad_key", tmp_path)


def test_a_sweep_name_typo_gets_a_suggestion_and_the_shipped_sweeps_are_listed(config_file):
    with pytest.raises(ValueError, match=r"Unknown sweep 'grd' \(did you mean 'grid'\?\)"):
        sweeps.sweep_points(str(config_file), "grd", config_file.parent)
    from configs import fra_eng

    assert sweeps.shipped_sweeps() == {"fra_eng": fra_eng.SWEEPS}
    for name in fra_eng.SWEEPS:  # each listed name is one get_hyper defines
        assert fra_eng.get_hyper(sweeps.hyper, name)


def test_dry_run_prints_and_runs_nothing(config_file, tmp_path):
    points = sweeps.sweep_points(str(config_file), "grid", tmp_path / "s")
    printed = []
    assert sweeps.run_sweep(points, dry_run=True, log=printed.append) == []
    assert len(printed) == 4 and all("experiments.train" in line for line in printed)
    assert not (tmp_path / "s").exists()


def _fake_point(tmp_path, name, overrides, command):
    workdir = tmp_path / name
    return sweeps.SweepPoint(name, overrides, workdir, command)


def _quiet(_: str) -> None:
    pass


def _trainer(calls: list[str], fail: set[str] = frozenset()):
    """A stand-in for one point's training run: records the call, saves the point's config
    as `experiments.train` does, and raises for the points named in `fail`."""

    def run_point(point, log_path):
        calls.append(point.name)
        ckpt.save_config(point.config, point.workdir)
        log_path.write_text("training...\n")
        if point.name in fail:
            raise sweeps.PointFailed(f"exit 2: FATAL: {point.name} diverged | badly\nsecond line")

    return run_point


def test_run_skips_finished_points_with_the_same_saved_config(config_file, tmp_path):
    points = sweeps.sweep_points(str(config_file), "grid", tmp_path / "s")
    calls = []
    assert len(sweeps.run_sweep(points, log=_quiet, run_point=_trainer(calls))) == 4
    assert calls == [p.name for p in points] and all(p.done for p in points)
    calls.clear()
    assert sweeps.run_sweep(points, log=_quiet, run_point=_trainer(calls)) == []
    assert calls == []  # finished with this very config: reused


def test_finished_point_of_another_config_is_refused_naming_the_keys(config_file, tmp_path):
    sweep_dir = tmp_path / "s"
    points = sweeps.sweep_points(f"{config_file}:d2l", "grid", sweep_dir)
    sweeps.run_sweep(points, log=_quiet, run_point=_trainer([]))
    # The same sweep on another variant and seed, pointed at the same folder.
    other = sweeps.sweep_points(f"{config_file}:base", "grid", sweep_dir, ["--config.seed=1"])
    calls = []
    with pytest.raises(sweeps.SweepError) as error:
        sweeps.run_sweep(other, log=_quiet, run_point=_trainer(calls))
    message = str(error.value)
    assert message.startswith("4 sweep point workdir(s) hold runs of another config")
    assert "norm_placement=pre,attention_kind=dot: seed: 0 -> 1; variant: 'd2l' -> 'base'" in (
        message
    )
    assert "Use another --sweep_dir" in message and calls == []
    with pytest.raises(sweeps.SweepError, match="another config"):  # also for a dry run
        sweeps.run_sweep(other, dry_run=True, log=_quiet)


def test_points_saved_before_a_key_was_added_are_reused_where_they_ran_as_its_default(tmp_path):
    """A finished sweep, then the framework gains a config key (eval.loss_batch_size was
    one): the saved config.json files lack it, and every point was refused as "another
    config" (eval.loss_batch_size: '<absent>' -> 0). At its default it is the same run; a
    swept key the saved run lacked is a difference only where the sweep's value is not its
    default."""
    config = f"{REPO / 'configs' / 'fra_eng.py'}:d2l"
    points = sweeps.sweep_points(config, "norm_placement", tmp_path / "s")
    sweeps.run_sweep(points, log=_quiet, run_point=_trainer([]))
    for point in points:  # as a version without these keys saved them
        path = point.workdir / "config.json"
        saved = json.loads(path.read_text(encoding="utf-8"))
        del saved["eval"]["loss_batch_size"]
        del saved["model"]["norm_placement"]
        path.write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(sweeps.SweepError) as refused:
        sweeps.run_sweep(points, log=_quiet, run_point=_trainer([]))
    lines = str(refused.value).splitlines()[1:-1]
    assert lines == [
        "  norm_placement=pre: model.norm_placement: '<absent>' -> 'pre'",
        "  norm_placement=rezero: model.norm_placement: '<absent>' -> 'rezero'",
    ]  # "post" is the default, as the saved run ran: not named
    calls = []
    assert sweeps.run_sweep(points[:1], log=_quiet, run_point=_trainer(calls)) == []
    assert calls == []  # finished with this config: reused


def test_unfinished_point_of_another_config_is_refused_too(config_file, tmp_path):
    (point,) = sweeps.sweep_points(str(config_file), "one", tmp_path)
    point.workdir.mkdir()
    ckpt.save_config(point.config, point.workdir)  # a partial run, e.g. killed
    changed = sweeps.sweep_points(str(config_file), "one", tmp_path, ["--config.model.size=3"])
    with pytest.raises(sweeps.SweepError, match=r"norm_placement=pre: model.size: 2 -> 3"):
        sweeps.run_sweep(changed, log=_quiet, run_point=_trainer([]))
    calls = []
    sweeps.run_sweep([point], log=_quiet, run_point=_trainer(calls))  # same config: resumed
    assert calls == [point.name]


def test_finished_point_without_saved_config_is_refused(config_file, tmp_path):
    (point,) = sweeps.sweep_points(str(config_file), "one", tmp_path)
    point.workdir.mkdir()
    (point.workdir / DONE_FILE).write_text("{}")
    with pytest.raises(sweeps.SweepError, match="config.json is missing"):
        sweeps.run_sweep([point], log=_quiet, run_point=_trainer([]))


def test_failed_point_is_recorded_the_rest_continue_and_a_rerun_retries_it(config_file, tmp_path):
    points = sweeps.sweep_points(str(config_file), "grid", tmp_path / "s")
    bad = points[1].name
    calls, logged = [], []
    ran = sweeps.run_sweep(points, log=logged.append, run_point=_trainer(calls, fail={bad}))
    assert calls == [p.name for p in points] and ran == points
    assert [p.name for p in points if not p.done] == [bad]
    error = f"exit 2: FATAL: {bad} diverged | badly second line"
    assert points[1].failure == error and f"{bad}: FAILED: {error}" in logged[-3]
    # Each point says where its output goes before it runs.
    log_file = points[0].workdir / LOG_FILE
    assert logged[0].startswith(f"[1/4] {points[0].name} (log: {log_file}): ")
    rows = sweeps.gather(points, tmp_path / "s")
    assert [r["status"] for r in rows] == ["done", f"FAILED: {error}", "done", "done"]
    table = (tmp_path / "s" / "results.md").read_text()
    assert f"| FAILED: exit 2: FATAL: {bad} diverged \\| badly second line |" in table

    # An exception that is not a PointFailed is recorded with its type.
    def crash(point, log_path):
        raise OSError("disk full")

    sweeps.run_sweep(points, log=_quiet, run_point=crash)  # only the failed point runs
    assert points[1].failure == "OSError: disk full"
    calls.clear()
    sweeps.run_sweep(points, log=_quiet, run_point=_trainer(calls))
    assert calls == [bad] and points[1].done and points[1].failure is None


def test_training_process_failure_is_one_line_with_the_last_logged_line(tmp_path):
    script = (
        "import sys; print('step 1'); "
        "print('FATAL: invalid config: x', file=sys.stderr); sys.exit(2)"
    )
    point = _fake_point(tmp_path, "a=1", {"a": 1}, [sys.executable, "-c", script])
    sweeps.run_sweep([point], log=_quiet)
    log = point.workdir / LOG_FILE
    assert point.failure == f"exit 2: FATAL: invalid config: x (log: {log})"
    header, first = log.read_text().splitlines()[:2]  # each attempt's output is headed
    assert header.startswith("--- sweep attempt, ") and first == "step 1"
    ok = _fake_point(tmp_path, "a=1", {"a": 1}, [sys.executable, "-c", "print('trained')"])
    sweeps.run_sweep([ok], log=_quiet)
    assert ok.done and ok.failure is None and log.read_text().endswith("trained\n")


def test_gather_writes_csv_markdown_and_plot(tmp_path):
    point = _fake_point(tmp_path, "a=1", {"model.a": 1}, [])
    point.workdir.mkdir()
    records = [
        {"step": 10, "split": "train", "time": 100.0, "tokens_per_sec": 1000.0},
        {"step": 20, "split": "train", "time": 110.0, "tokens_per_sec": 3000.0},
        {"step": 20, "split": "eval", "time": 112.0, "nll": 1.25, "accuracy": 0.5, "bleu": 12.5},
    ]
    (point.workdir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    unstarted = _fake_point(tmp_path, "a=2", {"model.a": 2}, [])
    rows = sweeps.gather([point, unstarted], tmp_path)
    assert rows[0]["eval_loss"] == 1.25 and rows[0]["bleu"] == 12.5
    assert rows[0]["tokens_per_sec"] == 2000 and rows[0]["wall_time_s"] == 12.0
    assert rows[0]["status"] == "partial" and rows[1]["status"] == "not started"
    csv_text = (tmp_path / "results.csv").read_text().splitlines()
    assert csv_text[0].startswith("point,model.a,status,step,eval_loss")
    assert "| a=1 | 1 | partial | 20 | 1.25 |" in (tmp_path / "results.md").read_text()
    assert Path(tmp_path / "results.png").stat().st_size > 1000


# --- the sweep's own checks, before anything runs -----------------------------------------


def test_points_carry_the_config_the_launcher_resolves(config_file, tmp_path):
    points = sweeps.sweep_points(
        f"{config_file}:d2l", "grid", tmp_path, ["--config.model.size=7", "--quiet_flag=1"]
    )
    config = points[3].config
    assert (config.model.norm_placement, config.model.attention_kind) == ("pre", "additive")
    assert config.model.size == 7 and isinstance(config.model.size, int)  # typed as train's
    assert config.variant == "d2l" and config.seed == 0
    assert points[3].command[-2:] == ["--config.model.size=7", "--quiet_flag=1"]


@pytest.mark.parametrize(
    "flag, swept",
    [
        ("--config.model.norm_placement=pre", "model.norm_placement"),
        ("--config.model.attention_kind=dot", "model.attention_kind"),
        ("--config.model=x", "model.norm_placement"),  # a parent of a swept key
    ],
)
def test_extra_overriding_a_swept_key_is_rejected(config_file, tmp_path, flag, swept):
    with pytest.raises(sweeps.SweepError) as error:
        sweeps.sweep_points(str(config_file), "grid", tmp_path, ["--config.seed=3", flag])
    assert str(error.value).startswith(f"--extra={flag} overrides {swept!r}, which sweep 'grid'")
    assert "Remove it from --extra" in str(error.value)


def test_extra_replacing_config_or_workdir_or_naming_an_unknown_key_is_rejected(
    config_file, tmp_path
):
    for flag in (f"--config={config_file}", "--workdir=/tmp/x"):
        with pytest.raises(sweeps.SweepError, match="the sweep sets --config and each point"):
            sweeps.sweep_points(str(config_file), "grid", tmp_path, [flag])
    with pytest.raises(ValueError, match=r"--extra=--config.model.nope=1: key 'model.nope' is"):
        sweeps.sweep_points(str(config_file), "grid", tmp_path, ["--config.model.nope=1"])
    with pytest.raises(sweeps.SweepError, match=r"point norm_placement=post,attention_kind=dot: "):
        sweeps.sweep_points(str(config_file), "grid", tmp_path, ["--config.model.size=two"])


def test_default_sweep_dir_names_the_config_and_variant():
    assert sweeps.default_sweep_dir("configs/fra_eng.py:d2l", "norm_x_attention") == Path(
        "runs/sweeps/fra_eng-d2l/norm_x_attention"
    )
    assert sweeps.default_sweep_dir("configs/fra_eng.py", "s") == Path(
        "runs/sweeps/fra_eng-default/s"
    )
    assert sweeps.default_sweep_dir("/x/fra_eng.py:small,runlocal", "s", "/r") == Path(
        "/r/fra_eng-small,runlocal/s"
    )


def test_validate_points_checks_every_point_with_the_run_config_validation(tmp_path):
    spec = "configs/fra_eng.py:runlocal"
    points = sweeps.sweep_points(spec, "norm_placement", tmp_path)
    sweeps.validate_points(points)  # the shipped sweep is valid
    # model_dim 32 has no 5 heads: every point is reported, with the library's message.
    bad = sweeps.sweep_points(spec, "norm_placement", tmp_path, ["--config.model.num_heads=5"])
    with pytest.raises(sweeps.SweepError) as error:
        sweeps.validate_points(bad)
    lines = str(error.value).splitlines()
    assert lines[0].startswith("3 of 3 sweep point configs are invalid (nothing was run)")
    assert [line.split(":")[0].strip() for line in lines[1:]] == [p.name for p in bad]
    assert all("is not divisible by model.num_heads=5" in line for line in lines[1:])


# --- the launcher ------------------------------------------------------------------------

LAUNCHER_CONFIG = textwrap.dedent(
    """
    from configs import fra_eng

    def get_config(arg=None):
        return fra_eng.get_config(arg)

    def get_hyper(h, name):
        if name == "placement":
            return h.sweep("model.norm_placement", ["post", "pre"])
        if name == "one":
            return h.sweep("model.norm_placement", ["pre"])
        raise h.unknown(name, ["placement", "one"])
    """
)


def _sweep_cli(tmp_path, *flags):
    config = tmp_path / "two_points.py"
    config.write_text(LAUNCHER_CONFIG)
    return subprocess.run(
        [sys.executable, "-m", "experiments.sweep", f"--config={config}:runlocal", *flags],
        cwd=tmp_path,
        env={**subprocess_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_dry_run_validates_and_prints_commands_in_the_default_folder(tmp_path):
    done = _sweep_cli(tmp_path, "--sweep=placement", "--dry_run")
    assert done.returncode == 0, done.stderr[-3000:]
    commands = done.stdout.splitlines()
    assert len(commands) == 2 and "--config.model.norm_placement=pre" in commands[1]
    # Relative to where the sweep runs (not to the source files), made absolute for the points.
    folder = tmp_path.resolve() / "runs/sweeps/two_points-runlocal/placement"
    assert f"--workdir={folder}/norm_placement=post" in commands[0]
    assert "2 point configs valid" in done.stderr and not (tmp_path / "runs").exists()
    bad = _sweep_cli(
        tmp_path, "--sweep=placement", "--dry_run", "--extra=--config.learning_rate=-1"
    )
    assert bad.returncode == 2 and not bad.stdout
    (fatal,) = [line for line in bad.stderr.splitlines() if line.startswith("FATAL:")]
    assert fatal == "FATAL: 2 of 2 sweep point configs are invalid (nothing was run):"
    assert "norm_placement=pre: learning_rate=-1" in bad.stderr
    typo = _sweep_cli(tmp_path, "--sweep=placment", "--dry_run")
    assert typo.returncode == 2 and "(did you mean 'placement'?)" in typo.stderr
    helped = _sweep_cli(tmp_path, "--help")  # the shipped configs' sweeps are listed
    assert helped.returncode == 0 and "fra_eng: norm_x_attention, norm_placement" in " ".join(
        helped.stdout.split()
    )


def test_cli_failed_point_is_marked_and_the_sweep_exits_non_zero(tmp_path):
    # A launcher flag whose value the launcher refuses fails the training process at once,
    # after the sweep's checks (an unknown flag is refused before anything runs).
    extra = f"--extra=--init_from={tmp_path / 'nothing'}"
    done = _sweep_cli(tmp_path, "--sweep=one", f"--sweep_dir={tmp_path / 's'}", extra)
    assert done.returncode == 1, done.stderr[-3000:]
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("| norm_placement=")]
    assert row.startswith("| norm_placement=pre | pre | FAILED: exit 2: FATAL: --init_from=")
    assert "FAILED: 1 of 1 sweep points: norm_placement=pre" in done.stderr


def test_one_real_point_trains_then_its_saved_config_matches_and_it_is_reused(tmp_path):
    # The one real training run here: the config the sweep resolves must equal the
    # config.json that experiments.train saves, or finished points would never be reused.
    config = tmp_path / "one_point.py"
    config.write_text(LAUNCHER_CONFIG)
    short = {
        "num_train_steps": 4,
        "checkpoint_every_steps": 4,
        "eval_every_steps": 4,
        "log_every_steps": 2,
        "eval.num_bleu_examples": 0,
        "eval.num_test_examples": -1,
    }
    extra = [f for f in TINY_RUN[1:] if f.split("=")[0][len("--config.") :] not in short]
    extra += [f"--config.{key}={value}" for key, value in short.items()]
    points = sweeps.sweep_points(f"{config}:runlocal", "one", tmp_path / "s", extra)
    logged = []
    assert sweeps.run_sweep(points, log=logged.append, timeout=300) == points
    (point,) = points
    assert point.done, (point.workdir / LOG_FILE).read_text()[-3000:]
    assert (
        json.loads((point.workdir / "config.json").read_text())["model"]["norm_placement"] == "pre"
    )
    assert sweeps.run_sweep(points, log=logged.append) == []
    assert logged[-1] == "[1/1] norm_placement=pre: finished with this config, skipped"
    (row,) = sweeps.gather(points, tmp_path / "s")
    assert row["status"] == "done" and row["step"] == 4 and row["eval_loss"] > 0
