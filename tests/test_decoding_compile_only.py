"""decoding/compile_only.py: inside `compiling()` a translation compiles every program it needs
and decodes nothing; the same translation afterwards compiles nothing and equals one made
without the warm-up; the switch holds in its own thread only."""

import threading

import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax.data.tokenizers import WordTokenizer
from transformer_jax.data.vocab import SPECIAL_TOKENS
from transformer_jax.decoding import compile_only
from transformer_jax.decoding.options import DecodeOptions
from transformer_jax.inference import Translator
from transformer_jax.runtime import compile_log
from transformer_jax.testing import random_params, tiny_config

pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

WORDS = WordTokenizer([*SPECIAL_TOKENS, *(f"w{i}" for i in range(30))])
# Two program widths (16 and 64 source tokens) and several batches of 4 rows.
LINES = [" ".join(f"w{(i * 7 + j) % 30}" for j in range(n)) for i, n in enumerate([3, 5, 20] * 3)]


def _translator(seed: int) -> Translator:
    cfg = tiny_config(len(SPECIAL_TOKENS) + 30, len(SPECIAL_TOKENS) + 30)
    return Translator.from_params(
        cfg, random_params(cfg, seed=seed, bias_std=0.0), WORDS, WORDS, max_decode_len=8,
        batch_size=4,
    )  # fmt: skip


@pytest.mark.parametrize(
    "settings",
    [dict(beam_size=1), dict(beam_size=3), dict(nbest=2, beam_size=2), dict(temperature=0.7)],
    ids=["greedy", "beam", "nbest", "sampling"],
)
def test_compiling_decodes_nothing_then_the_call_compiles_nothing(settings):
    options = {k: v for k, v in settings.items() if k != "nbest"}
    nbest = settings.get("nbest", 1)
    warm, cold = _translator(seed=11 + len(settings)), _translator(seed=11 + len(settings))
    with compile_log.recording() as log, compile_only.compiling():
        assert compile_only.active()
        empty = warm.translate_options(LINES, DecodeOptions(nbest=nbest, **options))
    assert not compile_only.active()
    assert log.programs, "the warm-up compiled nothing"
    assert all(h.texts == ("",) * len(h.texts) for h in empty)  # nothing was decoded

    with compile_log.recording() as again:
        got = warm.translate_options(LINES, DecodeOptions(nbest=nbest, **options))
    assert again.programs == [], [p.name for p in again.programs]
    expected = cold.translate_options(LINES, DecodeOptions(nbest=nbest, **options))
    assert [h.texts for h in got] == [h.texts for h in expected]
    np.testing.assert_allclose(
        [h.scores for h in got], [h.scores for h in expected], rtol=1e-5, atol=1e-5
    )
    assert any(t for h in got for t in h.texts)  # a real decoding, not empty strings


def test_the_switch_holds_in_its_own_thread_only():
    translator = _translator(seed=21)
    seen, results = {}, {}

    def other_thread():
        seen["other"] = compile_only.active()
        results["other"] = translator.translate(LINES[:2], beam_size=1)

    with compile_only.compiling():
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        results["here"] = translator.translate(LINES[:2], beam_size=1)
    assert seen["other"] is False
    assert results["here"] == ["", ""]
    assert results["other"] == _translator(seed=21).translate(LINES[:2], beam_size=1)
    assert any(results["other"])


def test_outside_the_block_call_runs_the_function():
    calls = []

    def fn(x):
        calls.append(x)
        return x + 1

    assert compile_only.call(fn, 1) == 2 and calls == [1]


def test_a_call_of_two_widths_compiles_both_at_once_then_traces_nothing_again(monkeypatch):
    """`decode_ids` hands one program per program width to worker threads before decoding;
    the translations equal those of a call that compiles each when first used, and a second
    call neither compiles nor traces."""
    monkeypatch.setattr(compile_only, "default_threads", lambda: 2)  # any host, any memory
    translator = _translator(seed=31)
    settings = dict(beam_size=2, alpha=0.43)  # alpha is static: programs no other test made
    compilers, compile_one = [], compile_only._compile

    def spy(lowered, handed):
        compilers.append(threading.current_thread().name)
        return compile_one(lowered, handed)

    monkeypatch.setattr(compile_only, "_compile", spy)
    with compile_log.recording() as log:
        got = translator.translate(LINES, **settings)
    assert len(log.programs) == 2, [p.name for p in log.programs]  # widths 16 and 64
    assert len(compilers) == 2 and all(name.startswith("compile") for name in compilers)
    # The calling thread waited for them: background only if it is not the main thread.
    main = threading.current_thread() is threading.main_thread()
    assert all(p.background is not main for p in log.programs)
    assert any(got)

    monkeypatch.setattr(compile_only, "ahead", lambda items, decode: None)
    with compile_log.recording() as again:
        assert translator.translate(LINES, **settings) == got
    assert again.programs == []
    assert all(seconds == 0.0 for seconds in compile_log.hand_over().seconds.values())  # no trace
    monkeypatch.undo()
    with compile_log.recording() as third:
        assert translator.translate(LINES, **settings) == got
    assert third.programs == []
    assert all(seconds == 0.0 for seconds in compile_log.hand_over().seconds.values())


def test_default_threads_are_the_cores_up_to_8_but_one_with_one_malloc_arena(monkeypatch):
    import os

    from transformer_jax.runtime import host_memory

    def cores(n):  # the cores this process may run on (taskset, a cgroup cpuset)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)

    monkeypatch.setattr(host_memory, "in_effect", lambda: "system")
    monkeypatch.setattr(os, "cpu_count", lambda: 16)  # the machine's: not what counts
    cores(16)
    assert compile_only.default_threads() == compile_only.MAX_THREADS == 8
    cores(2)
    assert compile_only.default_threads() == 2
    cores(1)
    assert compile_only.default_threads() == 1
    monkeypatch.setattr(host_memory, "in_effect", lambda: "reuse")
    assert compile_only.default_threads() == 1
    seen = []
    compile_only.ahead(lambda: seen.append("listed") or [1, 2, 3], seen.append)
    assert seen == []  # one thread: nothing ahead, the items not even listed
