"""The server's warm-up (`serving.engines.JaxEngine.warm_up`): every batch shape's program
compiled, several at once in worker threads (`decoding.compile_only.compiling(threads)`),
then each batch decoded once for real, after which serving compiles nothing."""

from __future__ import annotations

import logging
import threading

import jax
import numpy as np
import pytest

from tests.helpers import serving_translator
from transformer_jax.decoding import compile_only
from transformer_jax.runtime import compile_log
from transformer_jax.serving.batch_shapes import row_counts
from transformer_jax.serving.engines import JaxEngine


@pytest.fixture(scope="module")
def translator():
    return serving_translator()


def _spied(engine: JaxEngine) -> list[tuple[str, bool, int, int]]:
    """Records each `engine.translate` call: (thread, compiling?, lines, words a line)."""
    calls, real = [], engine.translate

    def spy(lines, options, line_ids=None):
        thread = threading.current_thread().name
        calls.append((thread, compile_only.active(), len(lines), len(lines[0].split())))
        return real(lines, options, line_ids)

    engine.translate = spy
    return calls


def test_programs_compile_in_worker_threads_then_each_batch_decodes_once(translator, monkeypatch):
    # Its own alpha (a static argument): no other test compiled these programs.
    engine = JaxEngine(
        translator, text="data", beam_size=2, alpha=0.23, batch_size=4, trained_len=40,
        warm_up_threads=3,
    )  # fmt: skip
    calls = _spied(engine)
    compilers, compile_one, second = [], compile_only._compile, threading.Event()

    def spy(lowered, handed):
        compilers.append(threading.current_thread().name)
        if len(compilers) == 1:  # busy until the next is handed over: another thread takes it
            assert second.wait(timeout=60)
        else:
            second.set()
        return compile_one(lowered, handed)

    monkeypatch.setattr(compile_only, "_compile", spy)
    with compile_log.recording() as log:
        batches = engine.warm_up(max_sentences=4)
    # Row counts 1, 2, 4 at two program widths (sources up to 16 and up to 32 tokens).
    assert row_counts(4) == [1, 2, 4] and batches == 6 and len(calls) == 12
    compiled, decoded = calls[:6], calls[6:]
    here = threading.current_thread().name
    assert all(thread == here and active for thread, active, _, _ in compiled)
    assert all(thread == here and not active for thread, active, _, _ in decoded)
    shapes = {(n, words) for _, _, n, words in compiled}
    assert shapes == {(n, words) for _, _, n, words in decoded} and len(shapes) == 6
    assert [n for _, _, n, _ in compiled] == [4, 4, 2, 2, 1, 1]  # the largest first
    assert len(compilers) == 6 and all(name.startswith("compile") for name in compilers)
    assert len(set(compilers)) >= 2  # several at once
    assert len(log.programs) == 6, [p.name for p in log.programs]  # none again, for real
    # Called from the main thread, which waited for them: not background.
    main = threading.current_thread() is threading.main_thread()
    assert all(p.background is not main for p in log.programs)
    # Their trace seconds went with them: the calling thread has nothing left unclaimed.
    assert all(seconds == 0.0 for seconds in compile_log.hand_over().seconds.values())

    with compile_log.recording() as again:
        for count in (1, 2, 3, 4):
            for line in ("go home .", " ".join(["calm"] * 20)):
                engine.translate([line] * count, engine.default_options)
    assert again.programs == [], [p.name for p in again.programs]


def test_one_thread_compiles_each_program_as_its_batch_decodes(translator):
    engine = JaxEngine(translator, text="data", beam_size=2, alpha=0.29, warm_up_threads=1)
    calls = _spied(engine)
    assert engine.warm_up(max_sentences=2) == len(calls) == 2  # rows 2 and 1, one width
    here = threading.current_thread().name
    assert all(thread == here and not active for thread, active, _, _ in calls)


def test_the_warm_up_compiles_the_extra_beam_sizes_it_is_given(translator, caplog):
    """After warm_up with warm_up_beam_sizes=(1,), greedy batches of every row count compile
    nothing; without it, the first greedy batch compiles, which the engine counts (/health's
    `compiled_while_serving`) and logs as a warning."""
    # Each engine's alpha is its own: no other test compiled its programs (alpha is static).
    lines = ["go .", "i lost .", "he is calm !"]
    cold = JaxEngine(translator, text="data", beam_size=2, alpha=0.31, batch_size=4)
    cold.warm_up(max_sentences=4)
    assert cold.describe()["compiled_while_serving"] == {"programs": 0, "seconds": 0.0}
    with caplog.at_level(logging.WARNING), compile_log.recording() as log:
        cold.translate(lines, cold.options({"beam_size": 1}))
    assert log.programs  # unwarmed greedy compiles: the check below can fail
    counted = cold.describe()["compiled_while_serving"]
    assert counted["programs"] == len(log.programs) and counted["seconds"] > 0
    assert f"compiled {len(log.programs)} programs" in caplog.text
    assert "beam_size=1" in caplog.text and "--warm_up_beam_sizes" in caplog.text
    cold.translate(lines, cold.options({"beam_size": 1}))  # compiled now: nothing more
    assert cold.describe()["compiled_while_serving"] == counted
    warm = JaxEngine(
        translator, text="data", beam_size=2, alpha=0.37, batch_size=4, warm_up_beam_sizes=[1]
    )
    assert [(o.beam_size, o.alpha) for o in warm.warm_up_options] == [(2, 0.37), (1, 0.37)]
    warm.warm_up(max_sentences=4)
    with compile_log.recording() as log:
        for count in (1, 2, 3, 4):
            warm.translate(lines[:count] or lines, warm.options({"beam_size": 1}))
    assert not log.programs, [p.name for p in log.programs]
    assert warm.describe()["compiled_while_serving"]["programs"] == 0
    with pytest.raises(ValueError, match="whole numbers >= 1"):
        JaxEngine(translator, warm_up_beam_sizes=[0])


def test_warm_up_threads_default_to_the_cores_and_must_be_whole_and_positive(translator):
    assert JaxEngine(translator).warm_up_threads == compile_only.default_threads()
    assert 1 <= compile_only.default_threads() <= compile_only.MAX_THREADS
    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError, match="warm-up threads must be a whole number >= 1"):
            JaxEngine(translator, warm_up_threads=bad)


def test_a_failed_compile_is_one_warning_at_the_blocks_end_and_compiles_when_used(caplog):
    fn = jax.jit(lambda x: x + 1)
    broken = jax.jit(lambda x: x.reshape(7))  # fails when traced for 3 elements
    with caplog.at_level(logging.WARNING), compile_only.compiling(threads=2) as session:
        assert compile_only.call(fn, np.ones(3, np.float32)).tolist() == [0.0, 0.0, 0.0]
        with pytest.raises(TypeError):  # traced here, in the calling thread: raised here
            compile_only.call(broken, np.ones(3, np.float32))
        with compile_only.compiling(threads=5) as inner:
            assert inner is session  # a block inside another joins it
        assert session.wait() == 0
    assert not compile_only.active()
    assert compile_only.call(fn, np.ones(3, np.float32)).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="threads must be a whole number >= 1"):
        with compile_only.compiling(threads=0):
            pass


def test_a_compile_failing_in_a_worker_is_one_warning(caplog, monkeypatch):
    def fail(lowered, handed):
        raise RuntimeError("out of host memory")

    monkeypatch.setattr(compile_only, "_compile", fail)
    fn = jax.jit(lambda x: x * 3)
    with caplog.at_level(logging.WARNING), compile_only.compiling(threads=2) as session:
        compile_only.call(fn, np.ones(2, np.float32))
        compile_only.call(fn, np.ones(2, np.float32))  # the same program: handed over once
        assert session.wait() == 1
    assert caplog.text.count("compiling ahead failed") == 1
    assert "out of host memory" in caplog.text
    assert compile_only.call(fn, np.ones(2, np.float32)).tolist() == [3.0, 3.0]
