"""A server's merged batch is decoded in groups of like output budgets (its search runs
every row until the batch's longest sentence ends): each line's result is the one it gets
alone, in the request's order, with its own prefix and its own samples."""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import serving_translator
from transformer_jax.serving.batch_shapes import like_budgets
from transformer_jax.serving.engines import JaxEngine


def words(n: int, word: str = "go") -> str:
    return " ".join([word] * n)


# Source lengths (with <eos>) 2, 17, 9, 3, 18, 8: budgets 8, 24, 16, 8, 24, 8.
LINES = ["go", words(16), words(8, "lost"), "he is", words(17, "he"), words(7, "calm")]


@pytest.fixture(scope="module")
def engine():
    return JaxEngine(serving_translator(), text="data", beam_size=2, group_budgets=True)


def test_a_batch_splits_where_one_call_would_run_many_rows_to_a_far_budget():
    """The README's budget rule (2·W + 10): 40 short lines beside 20 long ones decode apart
    (one call: 64 rows x 64 steps); a few mixed lines stay one call unless their rows cost
    more than a call."""
    translator = serving_translator()
    translator = dataclasses.replace(
        translator,
        settings={**translator.settings, "max_decode_len": None, "max_len_a": 2.0,
                  "max_len_b": 10, "batch_size": 64},
    )  # fmt: skip
    lines = [words(3)] * 40 + [words(20, "he")] * 20
    assert like_budgets(translator, lines, hypotheses=4) == [
        list(range(40)),
        list(range(40, 60)),
    ]
    # Six mixed lines: greedy's rows cost less than a second call; beam 4's do not.
    assert like_budgets(translator, LINES, hypotheses=1) == [[0, 3, 5, 2, 1, 4]]
    assert like_budgets(translator, LINES, hypotheses=4) == [[0, 3, 5, 2], [1, 4]]
    assert like_budgets(translator, []) == []


def test_the_default_splits_on_a_cpu_only(monkeypatch):
    from transformer_jax.runtime import backend

    assert JaxEngine(serving_translator()).group_budgets is True  # this machine: a CPU
    monkeypatch.setattr(backend, "expected_platform", lambda: "gpu")
    assert JaxEngine(serving_translator()).group_budgets is False


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"nbest": 2},
        {"beam_size": 1, "temperature": 0.9, "seed": 3, "nbest": 2},
        {"prefix": ["va", "", "il", "", "chez", ""]},
    ],
    ids=["plain", "nbest", "sampling", "prefixes"],
)
def test_a_merged_batch_answers_each_line_as_alone(engine, given):
    options = engine.options(given)
    line_ids = [0, 1, 0, 2, 1, 0]  # as the batcher numbers three merged requests' lines
    merged = engine.translate(LINES, options, line_ids=line_ids)
    for i, line in enumerate(LINES):
        alone = {**given, "prefix": given["prefix"][i]} if "prefix" in given else given
        single = engine.translate([line], engine.options(alone), [line_ids[i]])[0]
        assert [h["text"] for h in merged[i]] == [h["text"] for h in single]
        for key in ("score", "log_prob"):  # float32 sums over other batch shapes
            got, want = ([h.get(key, 0.0) for h in hyps] for hyps in (merged[i], single))
            assert got == pytest.approx(want, rel=1e-5, abs=1e-5), key
