"""Subword draws made ahead in worker processes, so that the host keeps up with an accelerator.

Drawing one batch's segmentations (data/sampling.py) takes one CPU core ~12 ms for a batch
of ~4,096 tokens a side: nothing beside a ~0.4 s step on 2 CPU cores, but the whole step on
a GPU. On an H200 the `deep_sampled` run trained at ~30 steps/s where the README run, which
draws nothing, ran at ~146 (benchmarks/README.md, "GPU results"): the host's draws set
the pace. A `DrawPool` draws the next batches' segmentations in worker processes while the
current step runs. Draws depend only on (texts, alpha, nbest, seed)
(`SentencePieceTokenizer.encode_sampled`), so batches are the same with any number of
workers as drawn inline (tests/test_data_sampling_pool.py).

Workers are started with "spawn": forking a process that runs JAX's threads is unsafe.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer
from transformer_jax.runtime import cpu_devices

# What "auto" (`data.sampling_workers = -1`) means where the step runs: none on a CPU, whose
# cores train the model (and the draws are ~3 % of its step there); on an accelerator a few,
# leaving a core for the training process.
AUTO_WORKERS = {"cpu": 0, "gpu": 4, "tpu": 4}

_tokenizers: dict[int, SentencePieceTokenizer] = {}  # in a worker: side -> tokenizer


def resolve_workers(value: int, platform: str, cpu_count: int | None = None) -> int:
    """`data.sampling_workers`: `value` if >= 0; for -1 ("auto") AUTO_WORKERS[platform],
    at most the cores less one."""
    if value >= 0:
        return value
    cores = cpu_count if cpu_count is not None else cpu_devices.local_cores()  # taskset's
    return max(0, min(AUTO_WORKERS[platform], cores - 1))


def _init_worker(model_protos: Sequence[bytes]) -> None:
    # Ctrl-C reaches the whole process group: the training process saves and stops, and
    # closes the pool; a worker's own KeyboardInterrupt would only print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker holds both ends of its task queue, so it never sees the training process
    # die (killed, out of memory): it watches its parent and leaves with it.
    parent = os.getppid()
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    by_proto: dict[bytes, SentencePieceTokenizer] = {}  # a shared vocabulary is loaded once
    for side, proto in enumerate(model_protos):
        _tokenizers[side] = by_proto.setdefault(proto, SentencePieceTokenizer(proto))


def _exit_with(parent: int, every_s: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(0)


def _draw(side: int, texts: list[str], alpha: float, nbest: int, seed: int) -> list[list[int]]:
    return _tokenizers[side].encode_sampled(texts, alpha=alpha, nbest=nbest, seed=seed)


class DrawPool:
    """`workers` processes that draw segmentations with the source and target tokenizers
    given by their SentencePiece model protos."""

    def __init__(self, model_protos: Sequence[bytes], workers: int):
        if workers < 1:
            raise ValueError(f"a DrawPool needs at least one worker, got {workers}")
        self.workers = workers
        self._executor = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(tuple(model_protos),),
        )

    def submit(
        self, side: int, texts: list[str], *, alpha: float, nbest: int, seed: int
    ) -> Future[list[list[int]]]:
        """A future of `encode_sampled(texts, alpha=alpha, nbest=nbest, seed=seed)` with side
        `side`'s tokenizer (0 source, 1 target)."""
        return self._executor.submit(_draw, side, texts, alpha, nbest, seed)

    def close(self) -> None:
        """Stops the workers; draws not started are dropped."""
        self._executor.shutdown(wait=False, cancel_futures=True)
