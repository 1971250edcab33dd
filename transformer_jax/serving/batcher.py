"""Dynamic batching: requests that arrive within a few milliseconds are decoded as one batch.

    batcher = Batcher(engine.translate, window_s=0.005, max_sentences=64)
    future = batcher.submit(["go .", "i lost ."], options)   # from any thread
    future.result()                                           # one result per sentence, in order
    batcher.close()

`translate(lines, options, line_ids=...)` gets, beside the merged lines, each line's index
within its own request: what a line's random draws are keyed by when sampling, so that a
request's samples do not depend on the requests it was merged with.

One worker thread owns the engine, so the model is only ever called from one thread. It
waits for a request, then keeps taking requests until `window_s` has passed since that first
one or `max_sentences` sentences are waiting. Requests with equal options (a hashable
value, e.g. `decoding.options.DecodeOptions`) are merged into one `translate(lines, options)`
call of at most `max_sentences` lines (a request larger than that alone is one call), and
each request's results are cut back out, in its order.

Adaptive (`adaptive=True`, the server's default): a batch also closes, without waiting
out the window, once it holds as many requests as there were clients at the end of the last
batch: its requests (their clients send the next when answered) and those queued while it
decoded. So a lone client's request is decoded at once, not after the window, and 64
clients' batches close when the 64th request is in. When fewer come back, the window ends
the batch, and the count follows the load.

What a batch saves depends on the model's cost per row: greedy search decoded 64 sentences
for far less than 64 times one (873 sentences/s at 64 clients against 212 at one, the README
model on 2 CPU cores), beam 4 only 1.2x less per sentence (2.3 ms for one, 122 ms for 64),
so there batching mostly saves each request's own overhead (benchmarks/README.md, "Speed").

An exception in one call is set on the futures of that call's requests only (a merged call
that fails is retried request by request, so one bad request fails alone); the worker goes
on with the next batch.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from typing import Any

# engine.translate(lines, options, line_ids=[index of each line in its request]) -> one
# result per line, in order.
TranslateFn = Callable[..., Sequence[Any]]


@dataclasses.dataclass
class _Request:
    lines: list[str]
    options: Hashable
    future: Future
    mergeable: bool = True


class Batcher:
    """A queue and one worker thread that merges concurrent requests into engine calls.

    window_s: how long the worker keeps gathering after the first request of a batch.
    adaptive: close a batch early once it holds as many requests as there were clients at
      the end of the previous one (module docstring); False: always gather for the window.
    max_sentences: most lines per engine call (a larger request is one call on its own).
    calls, sentences: engine calls made so far and the lines they decoded (their ratio is
    the mean batch: `/health` reports both).
    """

    def __init__(
        self,
        translate: TranslateFn,
        *,
        window_s: float,
        max_sentences: int,
        adaptive: bool = False,
    ):
        if window_s < 0:
            raise ValueError(f"the batch window must be >= 0 seconds, got {window_s}.")
        if max_sentences < 1:
            raise ValueError(f"max_sentences must be >= 1, got {max_sentences}.")
        self._translate = translate
        self.window_s = window_s
        self.adaptive = adaptive
        self._expected = 0  # clients at the end of the last batch: how many to wait for
        self.max_sentences = max_sentences
        self.calls = 0
        self.sentences = 0
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="batcher", daemon=True)
        self._worker.start()

    def submit(self, lines: Sequence[str], options: Hashable, *, mergeable: bool = True) -> Future:
        """Queues `lines` for translation with `options`; the future's result is the list of
        their results, in order (or the engine's exception). mergeable=False: decoded in a
        call of its own (options that hold something per line, e.g. a prefix each)."""
        if self._closed:
            raise RuntimeError("the batcher is closed.")
        future: Future = Future()
        self._queue.put(_Request(list(lines), options, future, mergeable))
        return future

    def close(self, timeout: float | None = None) -> None:
        """Stops the worker after the requests already queued; waits up to `timeout` s."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
        self._worker.join(timeout)

    # --- the worker ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._gather(first)
            for group in _groups(batch, self.max_sentences):
                self._decode(group)
            # The clients of this batch come back; those queued meanwhile are waiting too.
            self._expected = len(batch) + self._queue.qsize()
            if stop:
                return

    def _gather(self, first: _Request) -> tuple[list[_Request], bool]:
        """`first` and the requests that arrive within the window, up to max_sentences lines
        (adaptive: until as many as expected, then only those already queued);
        True if the batcher was closed meanwhile."""
        batch, count = [first], len(first.lines)
        deadline = time.monotonic() + self.window_s
        while count < self.max_sentences:
            try:
                wait = deadline - time.monotonic()
                if self.adaptive and len(batch) >= self._expected:
                    wait = 0  # as many as expected: the rest only if already here
                request = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if request is None:
                return batch, True
            batch.append(request)
            count += len(request.lines)
        return batch, False

    def _decode(self, group: list[_Request]) -> None:
        """One engine call for requests with equal options; results cut back per request. If
        a merged call fails, each request is decoded alone, so that only a request that fails
        on its own gets the error."""
        lines = [line for request in group for line in request.lines]
        line_ids = [i for request in group for i in range(len(request.lines))]
        self.calls += 1
        self.sentences += len(lines)
        try:
            results = list(self._translate(lines, group[0].options, line_ids=line_ids))
            if len(results) != len(lines):
                raise RuntimeError(f"the engine returned {len(results)} results for {len(lines)}.")
        except Exception as error:  # answered to these requests; the worker lives on
            if len(group) > 1:
                for request in group:
                    self._decode([request])
            else:
                group[0].future.set_exception(error)
            return
        start = 0
        for request in group:
            request.future.set_result(results[start : start + len(request.lines)])
            start += len(request.lines)


def _groups(batch: list[_Request], max_sentences: int) -> list[list[_Request]]:
    """The requests by equal options (first arrival first), each group cut into runs of at
    most `max_sentences` lines (a larger request alone)."""
    by_options: dict[Hashable, list[list[_Request]]] = {}
    for request in batch:
        key = request.options if request.mergeable else object()  # an unmergeable one: alone
        runs = by_options.setdefault(key, [[]])
        run = runs[-1]
        if run and sum(len(r.lines) for r in run) + len(request.lines) > max_sentences:
            runs.append(run := [])
        run.append(request)
    return [run for runs in by_options.values() for run in runs]
