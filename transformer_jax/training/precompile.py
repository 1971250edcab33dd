"""A run's eval and decoding programs, compiled in a background thread while it trains.

    ahead = precompile.Ahead(run, host_params, compile_ahead)
    ...train call...         # the first compiles the train step
    ahead.start(device_state.params)   # after each train call; the first starts the thread
    ahead.wait_for_eval()    # before an evaluation: its programs are ready
    ahead.close()            # after the loop: the closing report's programs are ready

An accelerator's first run of a config spends most of its time compiling (the README run on
an H200: 65 s of its 99; train step 21.5 s, eval 7.5, decoding 22.1), and without this the
loop waits for each program when it is first used: the eval step at the first evaluation,
the decoders at the first BLEU and again in the closing test report. With `precompile`
"background" they are compiled in a thread started as soon as the train step is compiled
(not before: XLA:GPU's autotuning times candidate kernels on the device, and the train
step's choice should not be timed beside other work), while the run trains: XLA compiles
outside Python's GIL, on host cores the training loop leaves idle. Each program is
compiled for the very shapes and shardings its later call passes (the eval step for the
replicated parameters and a validation batch; the decoders by the evaluators' and the
report's own translation calls in `decoding.compile_only` mode), so that call finds it in the
jitted function's cache (`runtime.compile_log` marks them `background`). The decoders are
traced in the thread and compiled in worker threads (`compile_only.default_threads()`: one
per host core up to 8; 1 under host_memory="reuse"), in parallel with each other and with
the eval step.

"auto" is "background" on GPU/TPU and "off" on CPU (`runtime.backend.PRECOMPILE`): on 2 CPU
cores the gain was within noise (benchmarks/LOG.md), the compiles sharing the cores the
train step runs on (their seconds nearly doubled). The results are the same either way.

A warm-up that fails is not the run's failure: one warning, and that program compiles when
first used, as without the thread. The loop waits for the thread's eval part before its first
evaluation (which would need those programs anyway; no program is compiled twice) and for the
rest when the run ends; a run stopped early (NaN, preemption) waits only for the compile in
flight.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
from absl import logging

from transformer_jax.decoding import compile_only
from transformer_jax.runtime import backend, compile_log

CHOICES = ("auto", "background", "off")
THREAD_NAME = "precompile"

# (compile_log kind, part, task): part "eval" is waited for before the first evaluation
Task = tuple[str, str, Callable[[], None]]


def resolve(value: str, platform: str | None = None) -> str:
    """`precompile` with "auto" resolved for `platform` (default: the running backend)."""
    platform = platform or backend.platform_name(jax.default_backend())
    return backend.resolve(backend.PRECOMPILE, value, platform)


class Background:
    """The warm-up thread: runs its tasks in order, each under its compile_log kind. The
    decoding programs they ask for compile in `threads` worker threads at once
    (`decoding.compile_only.compiling`); the eval part's before `wait_for_eval` returns."""

    def __init__(self, tasks: Sequence[Task], threads: int = 1):
        self._tasks = list(tasks)
        self._threads = threads
        self._eval_done = threading.Event()
        self._stop = threading.Event()
        self.failures: list[str] = []  # one line per task that raised
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with compile_only.compiling(threads=self._threads) as session:
                for kind, part, task in self._tasks:
                    if part != "eval" and not self._eval_done.is_set():
                        session.wait()  # the eval part's programs, handed to the workers
                        self._eval_done.set()
                    if self._stop.is_set():
                        break
                    self._run_task(kind, task)
                if self._stop.is_set():
                    session.cancel()  # only the compiles in flight finish
        finally:
            self._eval_done.set()
            self._tasks = []  # nor their parameters, once done

    def _run_task(self, kind: str, task: Callable[[], None]) -> None:
        try:
            with compile_log.kind(kind):
                task()
        except Exception as error:  # noqa: BLE001 - the program compiles when used
            line = f"{type(error).__name__}: {error}".splitlines()[0]
            self.failures.append(line)
            logging.warning(
                "Compiling %s ahead failed (%s); it compiles when first used.", kind, line
            )

    def wait_for_eval(self) -> None:
        """Returns once the eval step and the evaluators' programs are compiled (or failed)."""
        self._eval_done.wait()

    def close(self, *, finish: bool = True) -> None:
        """Waits for the thread: every task if `finish`, else only the compile in flight."""
        if not finish:
            self._stop.set()
        self._thread.join()


class Ahead:
    """A run's warm-up, started once the train step is compiled (`start` after each train
    call: the first starts the thread, later ones do nothing). Then the train step's compile,
    whose XLA:GPU autotuning times kernels on the device, has the device to itself, and the
    eval and decoding programs compile while it trains. Does nothing when `precompile`
    resolves to "off", or when the run never trains a step (its evaluation compiles inline).
    """

    def __init__(
        self,
        run: Any,
        host_params: Any,
        compile_ahead: Sequence[Callable[[Any, Any], None]] = (),
    ):
        on = resolve(run.config.precompile) == "background"
        self._pending = (run, host_params, tuple(compile_ahead)) if on else None
        self._thread: Background | None = None

    def start(self, device_params: Any) -> None:
        """Starts the thread the first time (module doc); `device_params`: the replicated
        parameters the loop evaluates (only their shapes and shardings are read)."""
        if self._pending is not None:
            run, host_params, compile_ahead = self._pending
            self._pending = None  # and the host parameters with it, once the tasks are done
            self._thread = Background(
                _tasks(run, device_params, host_params, compile_ahead),
                threads=compile_only.default_threads(),
            )

    def wait_for_eval(self) -> None:
        """Before an evaluation: its programs, if they are being compiled (`Background`)."""
        if self._thread is not None:
            self._thread.wait_for_eval()

    def close(self, *, finish: bool = True) -> None:
        """After the loop: waits for the thread (`Background.close`), if it started."""
        self._pending = None
        if self._thread is not None:
            self._thread.close(finish=finish)


def _tasks(
    run: Any,
    device_params: Any,
    host_params: Any,
    compile_ahead: Sequence[Callable[[Any, Any], None]],
) -> list[Task]:
    """`run`'s evaluators' programs (`compile_ahead(params)` methods), its eval step, and the
    launcher's `compile_ahead(context, params)` functions, in that order (the decoders first:
    handed to the worker threads, they compile while this thread compiles the eval step).
    host_params: the parameters' values on the host, for the decoders (placed on the devices
    as a translation would)."""
    shapes = _param_shapes(device_params)
    tasks: list[Task] = []
    for evaluator in run.evaluators:  # process 0's (none elsewhere)
        method = getattr(evaluator, "compile_ahead", None)
        if method is not None:
            tasks.append(("decode", "eval", lambda m=method: m(host_params)))
    tasks.append(("eval", "eval", lambda: _compile_eval_step(run, shapes)))
    if jax.process_index() == 0:  # the launcher's decoding after training is process 0's
        for fn in compile_ahead:
            tasks.append(("decode", "after", lambda f=fn: f(run.context, host_params)))
    return tasks


def _param_shapes(device_params: Any) -> Any:
    """Each array's shape, dtype and sharding: what a later call's cache entry is keyed by
    (lowered with bare shapes, the loop's call compiled the eval step again), without
    holding its buffers, which the train step donates."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), device_params
    )


def _compile_eval_step(run: Any, param_shapes: Any) -> None:
    """Compiles `run.built.eval_step` for the replicated parameters and the first validation
    batch: the shapes of every evaluation's batches (fixed-shape eval batches)."""
    batch = next(iter(run.pipeline.eval_batches("eval")), None)
    if batch is None:
        return
    batch = run.built.parallel.put_batch({k: v for k, v in batch.items() if k != "index"})
    run.built.eval_step.lower(param_shapes, batch).compile()
