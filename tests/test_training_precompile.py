"""training/precompile.py: "auto" per backend; the warm-up thread's order, its eval part waited
for on its own, a failing task only logged, an early stop skipping what has not started.
(A whole launch with precompile="background": tests/test_runtime_compile_log.py.)"""

from __future__ import annotations

import textwrap
import threading
import time
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs import fra_eng
from tests.helpers import run_npz_worker
from transformer_jax.decoding import compile_only
from transformer_jax.runtime import compile_log
from transformer_jax.training import precompile
from transformer_jax.training.config import ConfigError, validate_config
from transformer_jax.training.parallel import DataParallel


def test_auto_is_background_on_accelerators_and_off_on_cpu():
    assert precompile.resolve("auto", "cpu") == "off"
    assert precompile.resolve("auto", "gpu") == "background"
    assert precompile.resolve("auto", "tpu") == "background"
    assert precompile.resolve("background", "cpu") == "background"
    assert precompile.resolve("off", "gpu") == "off"
    assert precompile.resolve("auto") == "off"  # these tests run on CPU


def test_a_bad_value_names_the_key_and_the_choices():
    config = fra_eng.get_config()
    config.precompile = "eager"
    with pytest.raises(ConfigError, match=r"precompile.*eager"):
        validate_config(config, num_devices=1)


def test_tasks_run_in_order_in_one_thread_and_the_eval_part_is_waited_for_alone():
    order, release = [], threading.Event()

    def task(name, wait=None):
        def run():
            order.append((name, threading.current_thread().name))
            if wait is not None:
                assert wait.wait(timeout=30)

        return run

    ahead = precompile.Background(
        [("eval", "eval", task("eval step")), ("decode", "eval", task("bleu")),
         ("decode", "after", task("report", wait=release)), ("decode", "after", task("last"))]
    )  # fmt: skip
    ahead.wait_for_eval()  # returns while "report" still blocks
    assert [name for name, _ in order][:2] == ["eval step", "bleu"]
    assert {thread for _, thread in order} == {precompile.THREAD_NAME}
    release.set()
    ahead.close()
    assert [name for name, _ in order] == ["eval step", "bleu", "report", "last"]
    assert ahead.failures == []


def test_a_failing_task_is_logged_and_the_next_ones_run(caplog):
    ran = []

    def fail():
        raise RuntimeError("out of memory while compiling\nsecond line")

    ahead = precompile.Background(
        [("eval", "eval", fail), ("decode", "after", lambda: ran.append(1))]
    )
    ahead.close()
    assert ran == [1]
    assert ahead.failures == ["RuntimeError: out of memory while compiling"]
    assert "compiles when first used" in caplog.text


def test_an_early_stop_waits_for_the_task_in_flight_only():
    started, release, ran = threading.Event(), threading.Event(), []

    def slow():
        started.set()
        assert release.wait(timeout=30)
        ran.append("slow")

    ahead = precompile.Background(
        [("eval", "eval", slow), ("decode", "after", lambda: ran.append("skipped"))]
    )
    assert started.wait(timeout=30)
    threading.Timer(0.2, release.set).start()
    ahead.close(finish=False)
    assert ran == ["slow"]


def test_with_workers_the_eval_parts_programs_are_compiled_before_wait_for_eval(monkeypatch):
    """The eval part's decoders, handed to the worker threads, have compiled when
    wait_for_eval returns; the after part's compile meanwhile."""
    done, compile_one, release = [], compile_only._compile, threading.Event()

    def slow(lowered, handed):
        time.sleep(0.3)
        compile_one(lowered, handed)
        done.append(threading.current_thread().name)

    monkeypatch.setattr(compile_only, "_compile", slow)
    double = jax.jit(lambda x: x * 2)

    def decode(n):  # a decoder call as an evaluator's `compile_ahead` makes it
        return lambda: compile_only.call(double, np.ones(n, np.float32))

    ahead = precompile.Background(
        [("decode", "eval", decode(3)), ("decode", "eval", decode(5)),
         ("decode", "after", lambda: release.wait(30)), ("decode", "after", decode(7))],
        threads=2,
    )  # fmt: skip
    ahead.wait_for_eval()
    assert len(done) == 2 and all(name.startswith("compile") for name in done)
    release.set()
    ahead.close()
    assert len(done) == 3 and ahead.failures == []
    with compile_log.recording() as log:
        assert double(np.ones(7, np.float32)).tolist() == [2.0] * 7
    assert log.programs == []  # compiled ahead, in a worker


def _fake_run(precompile_value: str, parallelism: str = "pmap"):
    """A run with a mapped eval step of (params, batch) and one validation batch."""
    parallel = DataParallel.create(parallelism)

    def eval_fn(params, batch, axis_name):  # (params, batch) -> sums, as the built eval step
        return {"sum": jax.lax.psum(jnp.sum(batch["x"] @ params["w"]), axis_name)}

    batch = {"x": np.ones((4, 3), np.float32), "index": np.arange(4)}
    return types.SimpleNamespace(
        config=ml_collections.ConfigDict({"precompile": precompile_value}),
        built=types.SimpleNamespace(parallel=parallel, eval_step=parallel.map_eval_step(eval_fn)),
        pipeline=types.SimpleNamespace(eval_batches=lambda split: iter([batch])),
        evaluators=[],
        context="the run's EvalContext",
    )


def test_ahead_starts_once_after_the_first_train_call_and_never_when_off():
    host = {"w": np.full((3, 2), 0.5, np.float32)}
    seen = []
    run = _fake_run("background")
    device_params = run.built.parallel.put_replicated(host)
    ahead = precompile.Ahead(run, host, [lambda context, params: seen.append((context, params))])
    ahead.wait_for_eval()  # nothing started: returns at once
    ahead.start(device_params)  # after the first train call
    thread = ahead._thread
    ahead.start(device_params)  # after the later ones: nothing
    assert ahead._thread is thread is not None
    ahead.close()
    assert seen == [("the run's EvalContext", host)]
    assert thread.failures == []

    off = precompile.Ahead(_fake_run("auto"), host, [lambda *a: seen.append(a)])  # CPU: off
    off.start(device_params)
    off.wait_for_eval()
    off.close()
    assert off._thread is None and len(seen) == 1


@pytest.mark.parametrize("parallelism", ["pmap", "shard_map"])
def test_the_eval_step_compiled_ahead_is_the_one_the_loop_calls(parallelism):
    """`_compile_eval_step` lowers for the replicated parameters' shapes and shardings and a
    validation batch: the loop's own call then compiles nothing."""
    run = _fake_run("background", parallelism)
    parallel, eval_step = run.built.parallel, run.built.eval_step
    device_params = parallel.put_replicated({"w": np.full((3, 2), 0.5, np.float32)})
    shapes = precompile._param_shapes(device_params)
    with compile_log.recording() as ahead_log:
        precompile._compile_eval_step(run, shapes)
    assert len(ahead_log.programs) >= 1
    with compile_log.recording() as later:
        out = eval_step(device_params, parallel.put_batch({"x": np.ones((4, 3), np.float32)}))
    assert later.programs == [], [p.name for p in later.programs]
    np.testing.assert_allclose(parallel.get_replicated(out)["sum"], 12.0)


# On 2 devices, the real built steps: the parameters a train step returns, as `Ahead.start`
# sees them, give the eval step compiled ahead that the loop's own call then reuses.
TWO_DEVICE_WORKER = textwrap.dedent(
    """
    import sys, types
    import numpy as np
    from configs import model as model_configs
    from transformer_jax.runtime import compile_log
    from transformer_jax.training import build, precompile, training_defaults

    def batch(rows=4, length=5, vocab=23):
        rng = np.random.default_rng(0)
        ids = rng.integers(4, vocab, (rows, length)).astype(np.int32)
        return dict(src=ids, src_len=np.full((rows,), length, np.int32), tgt_in=ids,
                    tgt_out=ids, tgt_weight=np.ones((rows, length), np.float32))

    counts = []
    for parallelism in ("pmap", "shard_map"):
        config = training_defaults()
        config.model = model_configs.get_config("tiny")
        config.parallelism = parallelism
        built = build(config, src_vocab_size=23, tgt_vocab_size=23)
        parallel = built.parallel
        state = parallel.put_replicated(built.init_state())
        state, _ = built.train_step(state, parallel.put_batch(batch()))  # as the loop's call
        run = types.SimpleNamespace(
            built=built, pipeline=types.SimpleNamespace(eval_batches=lambda split: iter([batch()]))
        )
        shapes = precompile._param_shapes(state.params)
        with compile_log.recording() as ahead:
            precompile._compile_eval_step(run, shapes)
        with compile_log.recording() as later:
            built.eval_step(state.params, parallel.put_batch(batch()))
        counts += [len(ahead.programs), len(later.programs)]
    np.savez(sys.argv[1], counts=np.array(counts), devices=np.array(parallel.num_local_devices))
    """
)


def test_on_two_devices_the_loops_eval_call_reuses_the_program_compiled_ahead(tmp_path):
    out = run_npz_worker(TWO_DEVICE_WORKER, tmp_path, [], devices=2)
    assert int(out["devices"]) == 2
    ahead_pmap, later_pmap, ahead_shard, later_shard = out["counts"].tolist()
    assert ahead_pmap >= 1 and ahead_shard >= 1
    assert later_pmap == 0 and later_shard == 0, out["counts"]
