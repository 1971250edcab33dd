"""`serving.batcher.Batcher`: concurrent requests merged into engine calls, results cut back
in order, failures answered to the requests that cause them (a recording fake engine)."""

from __future__ import annotations

import threading
import time

import pytest

from transformer_jax.serving.batcher import Batcher


class Recorder:
    """Upper-cases each line; records every call; fails on a line that says "bad"; the first
    call can be held until `release` is set."""

    def __init__(self, hold_first: bool = False):
        self.calls: list[tuple[list[str], object]] = []
        self.line_ids: list[list[int]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        if not hold_first:
            self.release.set()

    def __call__(self, lines, options, *, line_ids):
        self.calls.append((list(lines), options))
        self.line_ids.append(list(line_ids))
        self.entered.set()
        self.release.wait(30)
        if any("bad" in line for line in lines):
            raise ValueError("a bad line")
        return [f"{line.upper()}/{options}" for line in lines]


def _results(futures):
    return [f.result(timeout=30) for f in futures]


def test_requests_queued_while_a_batch_decodes_are_merged_in_order():
    engine = Recorder(hold_first=True)
    batcher = Batcher(engine, window_s=0.001, max_sentences=64)
    first = batcher.submit(["a"], "o")
    assert engine.entered.wait(30)  # the worker is decoding "a": the next ones queue up
    futures = [batcher.submit([f"x{i}", f"y{i}"], "o") for i in range(5)]
    engine.release.set()
    assert first.result(timeout=30) == ["A/o"]
    assert _results(futures) == [[f"X{i}/o", f"Y{i}/o"] for i in range(5)]
    assert [lines for lines, _ in engine.calls] == [
        ["a"],
        [s for i in range(5) for s in (f"x{i}", f"y{i}")],
    ]
    assert (batcher.calls, batcher.sentences) == (2, 11)
    # Each line's index within its own request (what sampling keys are drawn from).
    assert engine.line_ids == [[0], [0, 1] * 5]
    batcher.close(timeout=30)


def test_requests_within_the_window_are_one_call_and_options_split_them():
    engine = Recorder()
    batcher = Batcher(engine, window_s=5.0, max_sentences=6)  # full at 6 lines: no 5 s wait
    futures = [
        batcher.submit(["a"], "beam1"),
        batcher.submit(["b", "c"], "beam4"),
        batcher.submit(["d"], "beam1"),
        batcher.submit(["e", "f"], "beam4"),
    ]
    assert _results(futures) == [
        ["A/beam1"],
        ["B/beam4", "C/beam4"],
        ["D/beam1"],
        ["E/beam4", "F/beam4"],
    ]
    assert sorted(engine.calls) == [(["a", "d"], "beam1"), (["b", "c", "e", "f"], "beam4")]
    batcher.close(timeout=30)


def test_an_adaptive_batch_closes_once_as_many_came_as_last_time():
    """adaptive: a batch waits for as many requests as there were clients at the end of the
    previous batch (its own and those queued meanwhile), not for the window."""
    engine = Recorder(hold_first=True)
    batcher = Batcher(engine, window_s=30.0, max_sentences=64, adaptive=True)
    start = time.monotonic()
    lone = batcher.submit(["a"], "o")  # the first batch expects none: decoded at once
    assert engine.entered.wait(30)
    queued = [batcher.submit([f"x{i}"], "o") for i in range(3)]  # wait while "a" decodes
    engine.release.set()
    assert lone.result(timeout=30) == ["A/o"]
    # "a" and the 3 queued meanwhile: 4 expected. The 3 queued, then one more 0.3 s later,
    # are one batch; the window (30 s) never ends one.
    time.sleep(0.3)
    late = batcher.submit(["y"], "o")
    assert _results([*queued, late]) == [["X0/o"], ["X1/o"], ["X2/o"], ["Y/o"]]
    assert time.monotonic() - start < 15
    assert [lines for lines, _ in engine.calls] == [["a"], ["x0", "x1", "x2", "y"]]
    batcher.close(timeout=30)


def test_an_adaptive_batch_of_fewer_than_last_time_ends_with_the_window():
    engine = Recorder()
    batcher = Batcher(engine, window_s=0.3, max_sentences=64, adaptive=True)
    batcher._expected = 5  # as after a batch of 5 clients
    start = time.monotonic()
    assert batcher.submit(["a"], "o").result(timeout=30) == ["A/o"]
    assert time.monotonic() - start >= 0.3  # waited the window for the other 4
    assert batcher._expected == 1
    batcher.window_s = 30.0
    again = time.monotonic()
    assert batcher.submit(["b"], "o").result(timeout=30) == ["B/o"]
    assert time.monotonic() - again < 15  # expects 1 now: decoded at once, no 30 s window
    batcher.close(timeout=30)


def test_a_call_holds_at_most_max_sentences_unless_one_request_is_larger():
    engine = Recorder(hold_first=True)
    batcher = Batcher(engine, window_s=0.001, max_sentences=4)
    batcher.submit(["hold"], "o")
    assert engine.entered.wait(30)
    futures = [batcher.submit(["a", "b", "c"], "o"), batcher.submit(["d"], "o")]
    futures += [batcher.submit(["e", "f", "g", "h", "i"], "o"), batcher.submit(["j"], "o")]
    engine.release.set()
    assert _results(futures)[2] == ["E/o", "F/o", "G/o", "H/o", "I/o"]
    sizes = [len(lines) for lines, _ in engine.calls[1:]]
    assert sizes == [4, 5, 1], engine.calls  # a + d merged; the 5-line request alone
    batcher.close(timeout=30)


def test_a_failing_request_fails_alone_and_the_worker_lives_on():
    engine = Recorder(hold_first=True)
    batcher = Batcher(engine, window_s=0.001, max_sentences=64)
    batcher.submit(["hold"], "o")
    assert engine.entered.wait(30)
    good, bad, other = (batcher.submit([line], "o") for line in ("ok", "bad one", "fine"))
    engine.release.set()
    assert good.result(timeout=30) == ["OK/o"] and other.result(timeout=30) == ["FINE/o"]
    with pytest.raises(ValueError, match="a bad line"):
        bad.result(timeout=30)
    # The merged call failed, then each request was decoded alone.
    assert [lines for lines, _ in engine.calls[1:]] == [
        ["ok", "bad one", "fine"],
        ["ok"],
        ["bad one"],
        ["fine"],
    ]
    assert batcher.submit(["again"], "o").result(timeout=30) == ["AGAIN/o"]
    batcher.close(timeout=30)


def test_an_unmergeable_request_is_a_call_of_its_own():
    engine = Recorder(hold_first=True)
    batcher = Batcher(engine, window_s=0.001, max_sentences=64)
    batcher.submit(["hold"], "o")
    assert engine.entered.wait(30)
    futures = [
        batcher.submit(["a"], "o"),
        batcher.submit(["b"], "o", mergeable=False),
        batcher.submit(["c"], "o"),
    ]
    engine.release.set()
    assert _results(futures) == [["A/o"], ["B/o"], ["C/o"]]
    assert sorted(lines for lines, _ in engine.calls[1:]) == [["a", "c"], ["b"]]
    batcher.close(timeout=30)


def test_close_finishes_the_queued_requests_and_refuses_new_ones():
    batcher = Batcher(Recorder(), window_s=0.001, max_sentences=8)
    future = batcher.submit(["a"], "o")
    batcher.close(timeout=30)
    assert future.result(timeout=1) == ["A/o"]
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(["b"], "o")
    with pytest.raises(ValueError, match="max_sentences"):
        Batcher(Recorder(), window_s=0.0, max_sentences=0)
