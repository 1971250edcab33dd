"""`benchmarks.accelerator_check`: the dry run end to end, a job cut off at its limit, the
budget, and the runs' log parsing."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import accelerator_check
from benchmarks.accelerator import jobs, pytest_lines, runs, sizes, table
from tests.helpers import JAX_CACHE, REPO, subprocess_env

KINDS = {"init", "train step", "eval", "decode", "other"}


def _reason(value) -> bool:
    """An explicit "not measured: <why>"."""
    return isinstance(value, str) and value.startswith("not measured: ") and len(value) > 16


def _no_bare_strings(value, path="") -> None:
    """Every string that says "not measured" gives a reason."""
    if isinstance(value, dict):
        for k, v in value.items():
            _no_bare_strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _no_bare_strings(v, f"{path}[{i}]")
    elif isinstance(value, str) and value.lower().startswith("not measured"):
        assert _reason(value), f"{path}: {value!r}"


def _check_programs(log: dict) -> None:
    assert log["seconds"] > 0 and log["programs"] == len(log["table"]) > 0
    assert {p["kind"] for p in log["table"]} <= KINDS
    assert log["count_by_kind"]["train step"] >= 1 and log["count_by_kind"]["decode"] >= 1


@pytest.mark.slow
def test_dry_run_reports_every_stage_with_numbers_or_a_reason(tmp_path):
    out = tmp_path / "report.json"
    flax_dir = REPO / ".flax_wmt"  # a local copy of flax's examples/wmt, if there is one
    # The dry run takes ~1 minute on 2 idle cores; the limits leave room for a busy machine
    # (the CLI's own, 90 s a job and 115 s in all, would cut jobs off there).
    argv = [sys.executable, "-m", "benchmarks.accelerator_check", "--dry_run", f"--out={out}",
            f"--cache_dir={JAX_CACHE}", "--budget_s=2400", "--limit=all=400"]  # fmt: skip
    if (flax_dir / "models.py").is_file():
        argv.append(f"--flax_wmt_dir={flax_dir}")
    result = subprocess.run(
        argv, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=2700
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| stage | what | result | target |" in result.stdout
    report = json.loads(out.read_text())
    for key in ("device", "date", "jax_version", "command", "versions"):
        assert report[key]
    assert report["dry_run"] is True
    # Every job ran to its end (nothing timed out or failed), each with its log beside the JSON.
    jobs_run = {name: job for name, job in report["jobs"].items() if isinstance(job, dict)}
    assert {name: job["status"] for name, job in jobs_run.items()} == dict.fromkeys(
        accelerator_check.DEFAULT_JOBS, "ok"
    )
    for asked_only in ("flags", "readme_inline"):  # only when asked for
        assert report["jobs"][asked_only] == "not measured: not in --jobs"
    stages = report["stages"]
    assert set(stages) == {"programs", "speed", "end_to_end", "tests", "flags"}
    _no_bare_strings(stages)

    programs = stages["programs"]
    for run in ("readme", "readme_cached", "deep_sampled"):
        _check_programs(programs[run])
    assert programs["cache"]["ratio"] > 0
    compiled = programs["compile_vs_flax_wmt"]["sizes"]["readme_local"]
    assert {k: v["compile_s"] > 0 for k, v in compiled["ours"].items()} == {
        "init": True,
        "train step": True,
    }
    theirs = compiled["flax_wmt"]
    assert _reason(theirs) or theirs["train step"]["compile_s"] > 0

    speed = stages["speed"]
    assert speed["base"]["peak_flops"] > 0 and speed["base"]["flops_per_step"] > 0
    have_torch = importlib.util.find_spec("torch") is not None
    for key, impls in (
        ("base", speed_worker_impls()),
        ("readme", ("ours (custom_vjp)", "ours (autodiff)")),
    ):
        for name in impls:
            entry = speed[key]["impls"][name]
            if name.startswith("torch") and not have_torch:
                assert entry == "not measured: torch not installed"
            elif name == "flax wmt" and _reason(entry):
                assert "flax_wmt_dir" in entry
            elif not (name == "torch.compile" and _reason(entry)):  # may fail on a CPU
                assert entry["tokens_per_s"] > 0 and entry["rounds"] >= 1, (key, name, entry)
                # Then timed again launching --pipeline steps in a row before one wait.
                assert entry["pipeline"] == 4 and entry["pipelined_rounds"] >= 1
                assert entry["pipelined_tokens_per_s"] > 0, (key, name, entry)
    # Ours again with the step mapped by jit(shard_map): a run-config key after a "+".
    (variant,) = [n for n in speed["base"]["impls"] if n.endswith("+parallelism=shard_map)")]
    assert speed["base"]["impls"][variant]["pipelined_tokens_per_s"] > 0
    # The speed job traces ours after the rounds: where its step's time goes, by op kind.
    profile = speed["base"]["profile"]
    assert profile["impl"].startswith("ours (") and profile["total_ms"] > 0
    assert profile["top"] and all(ms >= 0 and n >= 1 for _, ms, n, _ in profile["top"])
    assert set(profile["ms_per_step"]) == {"matmul", "attention", "other"}
    assert sum(profile["ms_per_step"].values()) == pytest.approx(profile["total_ms"], abs=0.01)
    assert Path(profile["trace"]).is_file() and "profile" not in speed["readme"]
    # Its matmuls told by name and by the step's optimised HLO, read from the compile cache.
    assert profile["matmuls_from"].startswith("names + the HLO's"), profile["matmuls_from"]
    # Then the fastest torch implementation measured, by its kernels (torch.profiler).
    torch_profile = speed["base"].get("profile_torch")
    if have_torch:
        assert torch_profile["impl"].startswith("torch") and torch_profile["total_ms"] > 0
    else:
        assert torch_profile is None

    for run in ("readme", "readme_cached", "deep_sampled"):
        e2e = stages["end_to_end"][run]
        assert e2e["status"] == "ok" and e2e["steps"] == "6/6"
        assert e2e["wall_s"] > e2e["first_step_s"] > 0 and e2e["steps_per_s"] > 0
        assert 0 <= e2e["bleu"]["bleu"] <= 100 and e2e["bleu"]["beam_size"] == 1

    tests = stages["tests"]
    assert tests["counts"]["passed"] > 0 and "failed" not in tests["counts"]


def speed_worker_impls() -> list[str]:
    from benchmarks.accelerator.speed_worker import IMPLS

    return list(IMPLS)


def test_a_job_past_its_limit_is_stopped_with_its_process_group_and_keeps_its_lines(tmp_path):
    # A child that prints, starts a grandchild, then hangs: both go at the limit.
    script = (
        "import subprocess, sys, time\n"
        "print('started', flush=True)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    job = jobs.run("hang", [sys.executable, "-c", script], timeout_s=2, log_dir=tmp_path)
    assert job.timed_out and job.status == "timed out after 2 s"
    assert job.wall_s < 20 and [line for _, line in job.lines] == ["started"]
    assert "started" in (tmp_path / "hang.log").read_text()
    failed = jobs.run("fail", [sys.executable, "-c", "raise SystemExit('bad value')"],
                      timeout_s=30, log_dir=tmp_path)  # fmt: skip
    assert failed.status == "failed (exit 1): bad value"


def test_a_job_the_budget_leaves_no_time_for_says_so_and_is_named_to_run_again(tmp_path, capsys):
    out = tmp_path / "r.json"
    report = accelerator_check.main(["--dry_run", "--jobs=tests", "--budget_s=1", f"--out={out}"])
    assert re.fullmatch(
        r"not measured: [01] s of the 1 s budget were left", report["stages"]["tests"]
    )
    assert report["stages"]["end_to_end"]["deep_sampled"] == "not measured: not in --jobs"
    assert report["stages"]["programs"]["cache"].startswith("not measured: ")
    assert json.loads(out.read_text())["stages"] == report["stages"]
    assert "run them again: --jobs=tests" in capsys.readouterr().out


def test_read_run_takes_the_rate_first_step_and_files_of_a_launch(tmp_path):
    lines = [
        (3.0, "I1126 train.py:1] Training /w for 6 steps (17 per epoch) from step 0 on 1 devices"),
        (9.0, "step 2/6 (33%) | loss 5.9 | nll 6.9 | 0.50 steps/s | 410 tok/s | ETA 0:00:07"),
        (9.4, "step 4/6 (67%) | loss 5.8 | nll 6.8 | 5.00 steps/s | 6,318 tok/s | ETA 0:00:01"),
        (9.8, "step 6/6 (100%) | loss 5.7 | nll 6.7 | 5.00 steps/s | 9,000 tok/s | ETA 0:00:00"),
        (12.0, "Compiled: 3 programs in 4.0 s (train step: 3.0, eval: 1.0; 0 from the cache)"),
    ]
    job = jobs.Job("readme", [], 60.0, 12.5, 0, lines, tmp_path / "readme.log")
    (tmp_path / "eval_report.json").write_text(
        json.dumps({"bleu": 41.5, "chrf": 60.0, "split": "test", "beam_size": 4, "x": 1})
    )
    program = {"name": "step", "kind": "train step", "seconds": 3.0, "cached": False}
    record = {"time": "t", "seconds": 4.0, "cached": 0, "programs": [program]}
    (tmp_path / "compile_log.jsonl").write_text("{}\n" + json.dumps(record) + "\n")
    run = runs.read_run(job, tmp_path)
    assert run["setup_s"] == 3.0 and run["steps"] == "6/6" and run["steps_per_s"] == 5.0
    assert run["first_step_s"] == 8.8  # step 2 ended at 9.0 s; one step at 5/s before it
    assert run["report_s"] == 2.7 and run["compiled_line"].startswith("Compiled: 3 programs")
    assert run["bleu"]["bleu"] == 41.5 and "x" not in run["bleu"]
    assert run["compile"]["seconds_by_kind"] == {"train step": 3.0}
    assert runs.read_run(job, tmp_path / "missing")["bleu"] == "not measured: no eval_report.json"


def test_programs_compiled_ahead_are_marked_in_the_table(tmp_path):
    """A launch with `precompile` "background": its log's programs say so, and the table too."""
    programs = [
        {"name": "step", "kind": "train step", "seconds": 20.0, "cached": False},
        {"name": "ev", "kind": "eval", "seconds": 7.5, "cached": False, "background": True},
        {"name": "dec", "kind": "decode", "seconds": 11.0, "cached": True, "background": True},
    ]
    record = {"time": "t", "seconds": 38.5, "cached": 1, "programs": programs}
    (tmp_path / "compile_log.jsonl").write_text(json.dumps(record) + "\n")
    log = runs.read_compile_log(tmp_path)
    assert log["background_s"] == 18.5
    stage = {run: "not measured: not in --jobs" for run in table.RUNS}
    stage.update(readme=log, cache="not measured: x", compile_vs_flax_wmt="not measured: y")
    rows = {what: result for _, what, result, _ in table.programs_rows(stage)}
    assert rows["README run: all"].endswith("; 18.5 s of them in a background thread")
    assert rows["README run: eval ev"] == "7.50 s (ahead)"
    assert rows["README run: decode dec"] == "11.00 s (cache) (ahead)"
    assert rows["README run: train step step"] == "20.00 s"


def test_packed_batches_keep_each_pair_in_one_segment_on_both_sides():
    batch = sizes.packed_batch(rows=4, width=24, vocab=50, seed=0)
    for key in ("src", "src_segment", "src_position", "tgt_in", "tgt_out", "tgt_segment"):
        assert batch[key].shape == (4, 24)
    for r in range(4):
        src_pairs = set(batch["src_segment"][r]) - {0}
        assert src_pairs == set(batch["tgt_segment"][r]) - {0} and len(src_pairs) >= 2
        for k in src_pairs:  # positions restart; <bos> opens each target
            at = batch["tgt_segment"][r] == k
            assert list(batch["src_position"][r][batch["src_segment"][r] == k])[0] == 0
            assert batch["tgt_in"][r][at][0] == 1
            assert (batch["tgt_in"][r][at][1:] == batch["tgt_out"][r][at][:-1]).all()
    assert (batch["src_len"] == (batch["src_segment"] > 0).sum(axis=1)).all()
    assert ((batch["src"] > 0) == (batch["src_segment"] > 0)).all()


def test_a_failed_implementation_is_named_by_its_error_not_by_a_note_after_it():
    from benchmarks.accelerator import speed_worker

    error = ValueError("shapes (2, 3) and (4,) do not match")
    error.add_note("For simplicity, JAX has removed its internal frames ...")  # as JAX adds
    said = speed_worker._error(error)
    assert said == "not measured: failed, ValueError: shapes (2, 3) and (4,) do not match"
    said = speed_worker._error(TimeoutError("did not finish within 22 s"))
    assert _reason(said) and "cut off" in said and "22 s" in said


@pytest.mark.parametrize("workers", [1, 2])
def test_a_cut_off_pytest_job_counts_and_names_what_ended_so_far(workers):
    if workers == 1:
        lines = ["tests/test_a.py::test_x PASSED [ 33%]", "tests/test_a.py::test_y FAILED [ 66%]"]
    else:
        lines = ["[gw0] [ 33%] PASSED tests/test_a.py::test_x ",
                 "[gw1] [ 66%] FAILED tests/test_a.py::test_y[2-float32] "]  # fmt: skip
    job = jobs.Job("tests", [], 10, 10.0, None, list(enumerate(lines)), "tests.log")
    result = pytest_lines.read(job, ["tests/test_a.py"], ("tests/test_a.py",))
    assert result["counts"] == {"passed so far": 1, "failed so far": 1, "error so far": 0,
                                "skipped so far": 0}  # fmt: skip
    assert result["failed"] == ["tests/test_a.py::test_y" + ("[2-float32]" if workers == 2 else "")]
    done = [*lines, "===== 1 failed, 1 passed in 3.21s ====="]
    job = jobs.Job("tests", [], 10, 10.0, 1, list(enumerate(done)), "tests.log")
    result = pytest_lines.read(job, ["tests/test_a.py"], ("tests/test_a.py",))
    assert result["counts"] == {"failed": 1, "passed": 1} and len(result["failed"]) == 1


def test_the_flags_job_runs_each_xla_variant_in_its_own_process_and_tables_it(
    tmp_path, monkeypatch, capsys
):
    seen = []

    def fake_run(name, argv, *, timeout_s, log_dir, env):
        seen.append(env["XLA_FLAGS"])
        out = next(a for a in argv if a.startswith("--out=")).removeprefix("--out=")
        step = {"first_call_s": 2.0 + len(seen), "step_ms": 10.0 / len(seen)}
        if len(seen) == 3:  # one variant's process dies before it writes anything
            return jobs.Job(name, argv, timeout_s, 1.0, 1, [(0.0, "Segmentation fault")], "x")
        jobs.write_partial(out, {"impls": {"ours (auto)": step}})
        return jobs.Job(name, argv, timeout_s, 1.0, 0, [], "x")

    monkeypatch.setattr(jobs, "run", fake_run)
    report = accelerator_check.main(["--dry_run", "--jobs=flags", f"--out={tmp_path / 'r.json'}"])
    variants = accelerator_check.FLAG_VARIANTS
    assert [f.split("--xla_backend_optimization_level=0")[-1].strip() for f in seen] == list(
        variants.values()
    )
    got = report["stages"]["flags"]["variants"]
    assert got["autotuning off"]["result"] == {"first_call_s": 4.0, "step_ms": 5.0}
    assert _reason(got["no Triton GEMMs"]["result"]) and "Segmentation" in str(got)
    table = capsys.readouterr().out
    assert "| flags | readme_local step, autotuning off (--xla_gpu_autotune_level=0) | " in table
    assert "compile (first call) 4.0 s, 5.00 ms a step" in table
    # Not a default job: a plain check neither runs nor tables it.
    assert "flags" not in accelerator_check.parse_args(["--dry_run"]).jobs


def test_an_implementation_of_ours_takes_run_config_keys_after_a_plus():
    from benchmarks.accelerator import sizes

    size = sizes.with_gradients(
        sizes.get("tiny"), "autodiff+parallelism=shard_map+steps_per_call=2"
    )
    assert size.config.gradients == "autodiff" and size.config.parallelism == "shard_map"
    assert size.config.steps_per_call == 2  # the key's own type
    for bad in ("autodiff+nope=1", "autodiff+parallelism", "autodiff+model=x"):
        with pytest.raises(ValueError, match="not a top-level run-config key=value"):
            sizes.with_gradients(sizes.get("tiny"), bad)
