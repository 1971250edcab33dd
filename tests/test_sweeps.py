import json
import sys
import textwrap
from pathlib import Path

import pytest

from transformer_jax import sweeps
from transformer_jax.sweeps import hyper

CONFIG = textwrap.dedent(
    """
    import ml_collections

    def get_config(arg=None):
        c = ml_collections.ConfigDict()
        c.seed = 0
        c.model = ml_collections.ConfigDict({"norm_placement": "post", "attention_kind": "dot"})
        c.variant = arg or "default"
        return c

    def get_hyper(h, name):
        if name == "grid":
            return h.product([h.sweep("model.norm_placement", ["post", "pre"]),
                              h.sweep("model.attention_kind", ["dot", "additive"])])
        if name == "bad_key":
            return h.sweep("model.nope", [1])
        raise h.unknown(name, ["grid", "bad_key"])
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
    with pytest.raises(ValueError, match="Unknown sweep 'nope'; this config defines: grid"):
        sweeps.sweep_points(str(config_file), "nope", tmp_path)
    with pytest.raises(ValueError, match=r"'model.nope' is not a config key; valid here"):
        sweeps.sweep_points(str(config_file), "bad_key", tmp_path)


def test_dry_run_prints_and_runs_nothing(config_file, tmp_path):
    points = sweeps.sweep_points(str(config_file), "grid", tmp_path / "s")
    printed = []
    assert sweeps.run_sweep(points, dry_run=True, log=printed.append) == []
    assert len(printed) == 4 and all("experiments.train" in line for line in printed)
    assert not (tmp_path / "s").exists()


def _fake_point(tmp_path, name, overrides, command):
    workdir = tmp_path / name
    return sweeps.SweepPoint(name, overrides, workdir, command)


def test_run_skips_finished_points_and_reports_failures(tmp_path):
    ok = [sys.executable, "-c", "print('trained')"]
    points = [
        _fake_point(tmp_path, "a=1", {"a": 1}, ok),
        _fake_point(tmp_path, "a=2", {"a": 2}, ok),
    ]
    assert len(sweeps.run_sweep(points, log=lambda _: None)) == 2
    assert all(p.done for p in points)
    assert sweeps.run_sweep(points, log=lambda _: None) == []  # finished points are skipped
    failing = _fake_point(tmp_path, "a=3", {"a": 3}, [sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match=r"a=3 failed \(exit 3\).*Re-run the sweep to resume"):
        sweeps.run_sweep([failing], log=lambda _: None)
    assert not failing.done


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
