"""Which XLA programs a process compiles, how long each took, and which came from the cache.

    with compile_log.recording() as log:
        with compile_log.kind("train step"):
            state, metrics = train_step(state, batch)   # compiles on the first call
    print(log.summary_line())
    # Compiled: 3 programs in 41.2 s (train step: 38.0, eval: 3.1, decode: 0.0, other: 0.1;
    #           1 from the persistent cache)

On an accelerator the first run of a config spends its minutes compiling (an H100 compiled
the README train step for ~75 s, then ran 150 steps a second), so a run says what it
compiled. JAX reports every program through `jax.monitoring`: tracing, lowering to MLIR and
the backend compile are three timed events named by the function; a program supplied by the
persistent compilation cache is still traced and lowered (its cache key is the lowered
module), and its "backend compile" is then the cache read, preceded on the same thread by a
cache-hit event. A program's seconds here are the sum of the three, so they are what the run
waited for.

Which part of the run a program belongs to is the innermost `kind(...)` block around the
call that compiled it ("train step", "eval", "decode", "init"; "other" outside any): the
function names alone do not say it (`pmap` wraps them, `shard_map` renames them).
A program compiled outside the main thread (a run's eval and decoding programs, compiled
ahead while it trains: `training.precompile`) is marked `background`: its seconds are counted
with the others but were not waited for, and the summary says how many. A program traced in
one thread and compiled in a worker (`decoding.compile_only`'s threads) counts as the
thread that traced it, which waits for it if that is the main thread (`hand_over`).
Only listeners are registered, while `recording()` is open: importing this changes nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from jax import monitoring

TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_HIT = "/jax/compilation_cache/cache_hits"

# The kinds a training run reports, in the summary's order (others follow, sorted).
KINDS = ("init", "train step", "eval", "decode", "other")

_kind: contextvars.ContextVar[str] = contextvars.ContextVar("compile_kind", default="other")
_active: list[CompileLog] = []  # open recordings, innermost last
_lock = threading.Lock()


@dataclasses.dataclass
class Program:
    """One compiled XLA program: the function's name, the run's part, seconds, cache hit."""

    name: str
    kind: str
    seconds: float  # trace + lower + backend compile (or cache read)
    cached: bool
    background: bool = False  # compiled outside the main thread, not waited for (module doc)


@dataclasses.dataclass(eq=False)  # identity: open recordings are told apart in `_active`
class CompileLog:
    """Programs compiled while `recording()` was open, in order."""

    programs: list[Program] = dataclasses.field(default_factory=list)
    # Trace and lowering seconds not yet claimed by a backend compile, per thread.
    _pending: dict[int, float] = dataclasses.field(default_factory=dict)
    _hit: dict[int, bool] = dataclasses.field(default_factory=dict)
    # Per compiling thread: whether its next program is background (`take_over`).
    _behind: dict[int, bool] = dataclasses.field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.programs)

    @property
    def num_cached(self) -> int:
        return sum(p.cached for p in self.programs)

    @property
    def background_seconds(self) -> float:
        """Seconds of programs compiled outside the main thread, while it did other work."""
        return sum(p.seconds for p in self.programs if p.background)

    def seconds_by_kind(self) -> dict[str, float]:
        """{kind: seconds}, every reported kind present (0.0 where nothing compiled)."""
        out = dict.fromkeys(KINDS[:-1], 0.0)
        for p in self.programs:
            out[p.kind] = out.get(p.kind, 0.0) + p.seconds
        return {k: out[k] for k in [*KINDS, *sorted(set(out) - set(KINDS))] if k in out}

    def count(self, kind: str) -> int:
        return sum(p.kind == kind for p in self.programs)

    def summary_line(self) -> str:
        """`Compiled: N programs in T s (train step: a, eval: b, decode: c; K from the ...)`,
        with `; B s of them in a background thread` when some were (`training.precompile`)."""
        parts = ", ".join(f"{k}: {s:.1f}" for k, s in self.seconds_by_kind().items())
        n = len(self.programs)
        behind = self.background_seconds
        aside = f"; {behind:.1f} s of them in a background thread" if behind else ""
        return (
            f"Compiled: {n} program{'s' * (n != 1)} in {self.seconds:.1f} s ({parts}; "
            f"{self.num_cached} from the persistent cache{aside})"
        )

    def table(self) -> list[dict]:
        """One dict per program (for JSON reports)."""
        return [dataclasses.asdict(p) for p in self.programs]

    def append_to(self, path: str | Path) -> None:
        """Appends one JSON line {"time", "seconds", "cached", "programs": [...]} to `path`
        (a run's `compile_log.jsonl`: one line per launch, resumes included)."""
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "seconds": round(self.seconds, 3),
            "cached": self.num_cached,
            "programs": [{**p, "seconds": round(p["seconds"], 3)} for p in self.table()],
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    # ---------------------------------------------------------------- listener side
    def _on_duration(self, event: str, seconds: float, fun_name: str = "?") -> None:
        thread = threading.get_ident()
        if event in (TRACE, LOWER):
            self._pending[thread] = self._pending.get(thread, 0.0) + seconds
        elif event == BACKEND_COMPILE:
            total = seconds + self._pending.pop(thread, 0.0)
            cached = self._hit.pop(thread, False)
            behind = self._behind.pop(
                thread, threading.current_thread() is not threading.main_thread()
            )
            self.programs.append(Program(str(fun_name), _kind.get(), total, cached, behind))

    def _on_event(self, event: str) -> None:
        if event == CACHE_HIT:
            self._hit[threading.get_ident()] = True


def _duration_listener(event: str, seconds: float, **kwargs) -> None:
    if event not in (TRACE, LOWER, BACKEND_COMPILE):
        return
    with _lock:
        for log in _active:
            log._on_duration(event, seconds, str(kwargs.get("fun_name", "?")))


def _event_listener(event: str, **kwargs) -> None:
    if event != CACHE_HIT:
        return
    with _lock:
        for log in _active:
            log._on_event(event)


@contextlib.contextmanager
def recording() -> Iterator[CompileLog]:
    """Records every program compiled in this process while the block runs (nestable)."""
    log = CompileLog()
    with _lock:
        first = not _active
        _active.append(log)
    if first:
        monitoring.register_event_duration_secs_listener(_duration_listener)
        monitoring.register_event_listener(_event_listener)
    try:
        yield log
    finally:
        with _lock:
            _active.remove(log)
            last = not _active
        if last:
            monitoring.unregister_event_duration_listener(_duration_listener)
            monitoring.unregister_event_listener(_event_listener)


@dataclasses.dataclass(frozen=True)
class Handed:
    """A program traced in one thread and compiled in another (`hand_over`)."""

    seconds: dict  # CompileLog -> its trace and lowering seconds not yet claimed
    behind: bool  # traced outside the main thread: compiled while the main one worked on


def hand_over() -> Handed:
    """This thread's trace and lowering seconds not yet claimed by a compile, taken from
    every open recording, for the thread that will compile the program (`take_over`):
    `decoding.compile_only` traces in one thread and compiles in another. The program is
    `background` if this thread is (the main thread waits for what it hands over)."""
    thread = threading.get_ident()
    with _lock:
        seconds = {log: log._pending.pop(thread, 0.0) for log in _active}
    return Handed(seconds, threading.current_thread() is not threading.main_thread())


def take_over(handed: Handed) -> None:
    """Counts `hand_over`'s seconds with the next program this thread compiles, and marks
    it background or not as the thread that handed it over."""
    thread = threading.get_ident()
    with _lock:
        for log, seconds in handed.seconds.items():
            if log in _active:
                log._pending[thread] = log._pending.get(thread, 0.0) + seconds
                log._behind[thread] = handed.behind


@contextlib.contextmanager
def kind(name: str) -> Iterator[None]:
    """Programs compiled inside this block belong to `name` (e.g. "train step")."""
    token = _kind.set(name)
    try:
        yield
    finally:
        _kind.reset(token)
