r"""Grain (the JAX ecosystem's loader) against our hand-written TrainIterator (issue 16, item 4).

    PYTHONPATH=. python -m benchmarks.grain_loader                     # configs/fra_eng.py
    PYTHONPATH=. python -m benchmarks.grain_loader --turns=6 --batches=40 --read_threads=4

Builds the training batches of a run config (default: the README run, SentencePiece 2k per
side, buckets (8, 12, 16, 24, 32, 64), ~2,048 tokens a batch, joined pairs 0.2) four ways:

  ours          data.TrainIterator over the corpus encoded once at start-up (numpy gathers).
  grain         a Grain pipeline from `tfds.data_source`: MapDataset.source -> map(parse +
                SentencePiece) -> concatenate(real, joined pairs) -> seed/shuffle/repeat ->
                to_iter_dataset (read threads) -> token-budget buckets (custom IterDataset).
  grain(mem)    the same from the split's raw records read into memory at start-up (one
                batched read), without read threads (Grain's advice for data in memory).
  grain(plan)   our epoch plan served as a Grain MapDataset (element k = batch k of the run):
                the only way found to get our exact batches out of Grain.

and prints, timed in alternating turns in one process (so a busy machine slows all alike):
batches/s, real (non-pad) and padded tokens/s, ms per batch against the train step's time
(`--step_ms`), then (a) whether each Grain pipeline reproduces our batches, (b) whether its
iterator state round-trips exactly (N batches, save through Grain's orbax CheckpointHandler,
M more; a new iterator restored from the file must give the same M), (c) what needed our own
code. Grain is not a project dependency: `pip install grain` first.

Measured 2026-11-23 (grain 0.2.18, the default config, 5 alternating turns of 30 batches,
two runs; 2 CPU cores shared with other jobs, load average 5-6: the ratios are what counts):

    loader        ms/batch     % of a 150 ms step   our batches      exact resume
    ours          0.12-0.22    0.1                  -                yes
    grain         138, 229     92, 152              no, equivalent   yes (own bucket state)
    grain(mem)    37-39        25-26                no, equivalent   yes (own bucket state)
    grain(plan)   0.45         0.3                  yes (50 of 50)   yes

grain: 2 read threads, then 8 (slower on 2 cores); grain(plan) is 2-4x ours' time.
Setup: ours 12 s (the corpus encoded once), grain 0 s, grain(mem) 1.5 s. Padding 24-25 % in
all. Parsing + SentencePiece alone is 52-67 us an example; grain(mem) spends ~320 us a row,
the rest in Grain's per-element machinery (stats and telemetry, index shuffle, the chain of
datasets; cProfile). `tfds.data_source` reads one record in ~2 ms. Over the README run's
3,600 steps that is ~140 s (grain(mem)) or ~500 s (grain) of host CPU against ours' 12 s, and
on a CPU host the loader shares the cores with XLA, so prefetching cannot hide it.

Verdict (issue 16, item 4): not adopted. Grain measures slower (ours is not a bottleneck at
0.1 % of a step; Grain's native pipeline would add 25-150 % to it) and keeps exact resume only
through our own bucket code; what it would replace is one numpy file (data/batching.py). Grain
has no token-budget length buckets, no epoch plan (the train loop's `batches_per_epoch` and
`epoch`), pads with one constant (our dummy rows need <eos>/<bos>), and shards examples per
process, which would give processes different bucket shapes in one step. Its one exact form,
grain(plan), only wraps our planner: a dependency for nothing.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

import jax
import numpy as np
import tensorflow_datasets as tfds
from absl import app, flags
from etils import epath
from ml_collections import config_flags
from tensorflow_datasets.proto import tf_example_pb2

try:
    import grain
except ImportError:
    sys.exit(
        "benchmarks/grain_loader.py needs Grain, which the project does not pin: pip install grain"
    )

from benchmarks.common import non_pad_tokens
from transformer_jax import launch
from transformer_jax.data import bucketing, create_input_pipeline, datasets
from transformer_jax.data.config import validate_data_config
from transformer_jax.data.encoding import TokenizedPairs, make_batch, pad_pairs
from transformer_jax.data.tokenizers import Tokenizer
from transformer_jax.data.vocab import EOS_ID

Batch = dict[str, np.ndarray]
Example = tuple[np.ndarray, np.ndarray]  # (source ids + <eos>, target ids + <eos>), int32
SEQUENTIAL = grain.ReadOptions(num_threads=0)  # PlannedBatches moves one iterator in order


def flat(batch: Batch) -> Batch:
    """A batch with any leading device axes merged: src (B, S), src_len (B,), ... (both the
    pmap layout (D, B_dev, ...) and per-process batches (B, ...) come out the same)."""
    return {
        key: value.reshape((-1,) + value.shape[value.ndim - (key != "src_len") :])
        for key, value in batch.items()
    }


# -- the Grain pipeline ------------------------------------------------------------------------


def record_encoder(
    keys: tuple[str, str], src_tok: Tokenizer, tgt_tok: Tokenizer, max_src: int, max_tgt: int
) -> Callable[[bytes], Example | None]:
    """A raw fra_eng record -> (src ids, tgt ids) with <eos>, or None beyond the limits (the
    config's long_pairs="skip"; Grain's iterators drop None)."""

    def encode(record: bytes) -> Example | None:
        feature = tf_example_pb2.Example.FromString(record).features.feature
        src, tgt = (feature[key].bytes_list.value[0].decode("utf-8") for key in keys)
        src_ids = np.asarray(src_tok.encode(src) + [EOS_ID], np.int32)
        tgt_ids = np.asarray(tgt_tok.encode(tgt) + [EOS_ID], np.int32)
        if len(src_ids) > max_src or len(tgt_ids) > max_tgt:
            return None
        return src_ids, tgt_ids

    return encode


def joined_pairs(
    real: grain.MapDataset, count: int, seed: int, max_src: int, max_tgt: int
) -> grain.MapDataset:
    """`count` joined pairs "a . b ." (data/augment.py's idea, drawn per index instead of once
    over the encoded corpus): pair j joins two real pairs drawn from rng(seed, j); None if
    they coincide, one is missing, or the join exceeds a limit."""

    def join(j: int) -> Example | None:
        a, b = np.random.default_rng([seed, j]).integers(len(real), size=2)
        first, second = real[int(a)], real[int(b)]
        if a == b or first is None or second is None:
            return None
        src = np.concatenate([first[0][:-1], second[0]])  # first <eos> dropped
        tgt = np.concatenate([first[1][:-1], second[1]])
        return (src, tgt) if len(src) <= max_src and len(tgt) <= max_tgt else None

    return grain.MapDataset.range(count).map(join)


def grain_examples(
    data_cfg, src_tok: Tokenizer, tgt_tok: Tokenizer, in_memory: bool
) -> grain.MapDataset:
    """The infinite shuffled stream of training examples as a random-access MapDataset:
    element i = (i, (src ids, tgt ids)) or None (too long / failed join). Each epoch is
    reshuffled (repeat folds the epoch into the shuffle seed).

    The source is `tfds.data_source` itself, or with `in_memory` its raw records read once
    in one batched call: array_record reads one record in ~2 ms through `__getitem__` (a
    parallel read per call; google/array_record#143, google/grain#688), ~40 us in a batch.
    """
    source = datasets.prepared_builder(data_cfg).as_data_source(
        split=data_cfg.train_split, deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES
    )
    if in_memory:
        source = source.__getitems__(list(range(len(source))))  # [bytes]
    max_src, max_tgt = data_cfg.max_src_len, data_cfg.max_tgt_len
    keys = (data_cfg.source_lang, data_cfg.target_lang)
    real = grain.MapDataset.source(source).map(
        record_encoder(keys, src_tok, tgt_tok, max_src, max_tgt)
    )
    parts = [real]
    count = round(data_cfg.concat_fraction * len(real))
    if count:
        parts.append(joined_pairs(real, count, data_cfg.shuffle_seed, max_src, max_tgt))
    examples = grain.MapDataset.concatenate(parts)
    stream = examples.seed(data_cfg.shuffle_seed).shuffle().repeat()
    # The stream index travels with the element, so a bucket's buffer can be saved as indices.
    return stream.map_with_index(lambda i, example: (i, example))


def padded_batch(examples: Sequence[Example], src_width: int, tgt_width: int) -> Batch:
    """Our batch dict (data/encoding.py's make_batch) of `examples`, padded to the widths."""
    tokenized = TokenizedPairs(
        src=[list(src) for src, _ in examples],
        tgt=[list(tgt) for _, tgt in examples],
        src_len=np.array([len(src) for src, _ in examples], np.int32),
        tgt_len=np.array([len(tgt) for _, tgt in examples], np.int32),
    )
    encoded = pad_pairs(tokenized, src_width, tgt_width)
    return make_batch(encoded, np.arange(len(examples)), src_width, tgt_width)


class TokenBuckets(grain.IterDataset):
    """Streaming token-budget buckets (tf.data's bucket_by_sequence_length; Grain has none):
    an example joins the buffer of the smallest boundary >= max(src, tgt length); a buffer
    that reaches its bucket's rows (rows x width ~ batch_tokens) becomes a batch padded to
    that width. Every process runs the whole global stream and keeps its contiguous slice
    of each batch, so all processes step on the same bucket shape."""

    def __init__(
        self,
        parent: grain.IterDataset,
        stream: grain.MapDataset,
        *,
        boundaries: Sequence[int],
        rows: Sequence[int],
        max_src: int,
        max_tgt: int,
        process_index: int = 0,
        process_count: int = 1,
    ):
        super().__init__(parent)
        self.stream = stream  # random access, to refill the buffers on restore
        self.boundaries, self.rows = tuple(boundaries), tuple(rows)
        self.max_src, self.max_tgt = max_src, max_tgt
        self.process_index, self.process_count = process_index, process_count

    def __iter__(self) -> _TokenBucketIterator:
        return _TokenBucketIterator(self._parent.__iter__(), self)


class _TokenBucketIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, spec: TokenBuckets):
        super().__init__(parent)
        self._spec = spec
        self._buffers: list[list[tuple[int, Example]]] = [[] for _ in spec.boundaries]

    def __next__(self) -> Batch:
        spec = self._spec
        while True:
            index, example = next(self._parent)
            length = max(len(example[0]), len(example[1]))
            bucket = bisect.bisect_left(spec.boundaries, length)  # bucketing.bucket_ids' rule
            buffer = self._buffers[bucket]
            buffer.append((index, example))
            if len(buffer) == spec.rows[bucket]:
                self._buffers[bucket] = []
                per_process = len(buffer) // spec.process_count
                mine = buffer[spec.process_index * per_process :][:per_process]
                width = spec.boundaries[bucket]
                return padded_batch(
                    [ex for _, ex in mine], min(width, spec.max_src), min(width, spec.max_tgt)
                )

    def get_state(self) -> dict:
        """The read position plus the stream indices waiting in each bucket (JSON-able)."""
        return {
            "parent": self._parent.get_state(),
            "buffers": [[int(i) for i, _ in buffer] for buffer in self._buffers],
        }

    def set_state(self, state: dict) -> None:
        self._parent.set_state(state["parent"])
        self._buffers = [[self._spec.stream[i] for i in ids] for ids in state["buffers"]]


def grain_pipeline(
    data_cfg,
    pipe,
    read_threads: int,
    *,
    in_memory: bool = False,
    process_index: int = 0,
    process_count: int = 1,
) -> TokenBuckets:
    """The whole Grain pipeline for `data_cfg`, with our pipeline's tokenizers and rows."""
    stream = grain_examples(data_cfg, pipe.src_tokenizer, pipe.tgt_tokenizer, in_memory)
    boundaries = bucketing.resolve_boundaries(
        data_cfg.bucket_boundaries,
        data_cfg.bucket_step,
        data_cfg.max_src_len,
        data_cfg.max_tgt_len,
    )
    read = grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=512)
    return TokenBuckets(
        stream.to_iter_dataset(read),
        stream,
        boundaries=boundaries,
        rows=[pipe.train_iter.bucket_rows(b) for b in range(len(boundaries))],
        max_src=data_cfg.max_src_len,
        max_tgt=data_cfg.max_tgt_len,
        process_index=process_index,
        process_count=process_count,
    )


class PlannedBatches(grain.MapDataset):
    """Our TrainIterator's batches as a Grain MapDataset: element k is batch k of the run
    (epoch k // batches_per_epoch). Sequential reads only (read_threads=0): it moves one
    private copy of our iterator, seeking with set_state when k is not the next batch."""

    def __init__(self, train_iter):
        super().__init__()
        self._iter = copy.copy(train_iter)  # own position; shares the encoded arrays
        self._iter.set_state({**train_iter.get_state(), "epoch": 0, "position": 0})
        self._per_epoch = self._iter.batches_per_epoch
        self._next = 0

    def __len__(self) -> int:
        return sys.maxsize

    def __getitem__(self, k):
        if isinstance(k, slice):
            return self.slice(k)
        if k != self._next:
            epoch, position = divmod(k, self._per_epoch)
            self._iter.set_state({**self._iter.get_state(), "epoch": epoch, "position": position})
        self._next = k + 1
        return flat(next(self._iter))


# -- measurements ------------------------------------------------------------------------------


def padded_tokens(batch: Batch) -> int:
    return batch["src"].size + batch["tgt_out"].size


def timed_turns(
    loaders: dict[str, Iterator[Batch]], turns: int, batches: int
) -> dict[str, dict[str, float]]:
    """Per loader: seconds, batches, real and padded tokens over `turns` turns of `batches`
    batches each, the loaders taking turns (one untimed warm-up turn first)."""
    totals = {name: dict(seconds=0.0, batches=0, rows=0, real=0, padded=0) for name in loaders}
    for turn in range(turns + 1):
        for name, loader in loaders.items():
            start = time.perf_counter()
            got = [flat(next(loader)) for _ in range(batches)]
            elapsed = time.perf_counter() - start
            if turn:  # turn 0 warms up threads, plans and caches
                t = totals[name]
                t["seconds"] += elapsed
                t["batches"] += len(got)
                t["rows"] += sum(len(batch["src_len"]) for batch in got)
                t["real"] += sum(map(non_pad_tokens, got))
                t["padded"] += sum(map(padded_tokens, got))
    return totals


def same_batches(a: Sequence[Batch], b: Sequence[Batch]) -> int:
    """How many of the paired batches are identical (same keys, shapes and values)."""
    return sum(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


def slices_reassemble(make: Callable[[int, int], Iterator[Batch]], batches: int) -> str:
    """Whether 2 processes' slices (make(process_index, process_count)) of the first batches,
    concatenated, are the rows of the 1-process batches (the contiguous layout of ours)."""
    whole = list(itertools.islice(make(0, 1), batches))
    parts = [list(itertools.islice(make(p, 2), batches)) for p in (0, 1)]
    same = 0
    for full, first, second in zip(whole, *parts, strict=True):
        joined = {key: np.concatenate([first[key], second[key]]) for key in full}
        same += all(np.array_equal(joined[k], full[k][: len(joined[k])]) for k in full)
    return f"{same}/{batches} batches reassemble"


def encode_cost(data_cfg, pipe, n: int = 2000) -> float:
    """Microseconds per example of parsing a record and SentencePiece on both sides, alone."""
    source = datasets.prepared_builder(data_cfg).as_data_source(
        split=data_cfg.train_split, deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES
    )
    # Evenly spaced: the split is stored shortest first.
    picks = np.linspace(0, len(source) - 1, n).astype(int).tolist()
    records = source.__getitems__(picks)
    keys = (data_cfg.source_lang, data_cfg.target_lang)
    encode = record_encoder(
        keys, pipe.src_tokenizer, pipe.tgt_tokenizer, data_cfg.max_src_len, data_cfg.max_tgt_len
    )
    start = time.perf_counter()
    for record in records:
        encode(record)
    return 1e6 * (time.perf_counter() - start) / n


def resume_check(make: Callable[[], grain.DatasetIterator], first: int, more: int) -> str:
    """Takes `first` batches, saves the state with Grain's orbax CheckpointHandler, takes
    `more`; a fresh iterator restored from the file must yield the same `more` batches."""
    it = make()
    for _ in range(first):
        next(it)
    with tempfile.TemporaryDirectory() as tmp:
        grain.checkpoint.CheckpointHandler().save(epath.Path(tmp), it)
        expected = [flat(next(it)) for _ in range(more)]
        restored = grain.checkpoint.CheckpointHandler().restore(epath.Path(tmp), make())
        got = [flat(next(restored)) for _ in range(more)]
    same = same_batches(expected, got)
    return f"{'exact' if same == more else 'NOT exact'}: {same}/{more} batches identical"


FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", "configs/fra_eng.py", "Run config (its data part).")
flags.DEFINE_integer("turns", 4, "Timed turns per loader (after one warm-up turn).")
flags.DEFINE_integer("batches", 30, "Batches per turn.")
flags.DEFINE_integer("read_threads", 2, "Grain read threads from tfds.data_source.")
flags.DEFINE_float(
    "step_ms",
    150.0,
    "Train step time to compare with (the default config: ~140-160 ms on 2 CPU cores).",
)
flags.DEFINE_list("resume", ["37", "23"], "N,M: batches before and after the saved state.")
flags.DEFINE_integer("compare", 50, "Batches compared with ours for (a).")


def print_rates(totals: dict[str, dict[str, float]], setups: dict[str, float]) -> None:
    header = (
        f"{'loader':<13}{'setup s':>8}{'batches/s':>11}{'ms/batch':>10}{'us/row':>8}"
        f"{'% of step':>10}"
        f"{'real tok/s':>12}{'padded tok/s':>14}{'padding':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, t in totals.items():
        ms = 1e3 * t["seconds"] / t["batches"]
        print(
            f"{name:<13}{setups[name]:>8.1f}{t['batches'] / t['seconds']:>11.1f}{ms:>10.2f}"
            f"{1e6 * t['seconds'] / t['rows']:>8.1f}"
            f"{ms / FLAGS.step_ms:>10.1%}{t['real'] / t['seconds']:>12,.0f}"
            f"{t['padded'] / t['seconds']:>14,.0f}{1 - t['real'] / t['padded']:>9.1%}"
        )
    per_batch = {name: t["seconds"] / t["batches"] for name, t in totals.items()}
    ratios = ", ".join(
        f"{name} {per_batch[name] / per_batch['ours']:.2f}x" for name in per_batch if name != "ours"
    )
    print(
        f"time per batch / ours: {ratios} "
        f"({FLAGS.turns} alternating turns of {FLAGS.batches} batches; "
        f"{FLAGS.read_threads} Grain read thread(s); the machine may be shared: "
        "compare ratios, not absolute rates)"
    )


def main(argv: Sequence[str]) -> None:
    del argv
    tfds.disable_progress_bar()
    data_cfg = FLAGS.config.data
    if not (data_cfg.bucketing and data_cfg.batch_tokens and data_cfg.drop_remainder):
        raise app.UsageError(
            "this comparison covers token-budget buckets with drop_remainder=True (the "
            "default config); set data.bucketing=True and data.batch_tokens > 0."
        )
    validate_data_config(data_cfg, num_devices=jax.local_device_count())
    start = time.perf_counter()
    pipe = create_input_pipeline(data_cfg, row_multiple=jax.local_device_count())
    ours_setup = time.perf_counter() - start
    threads = FLAGS.read_threads
    native = lambda: iter(grain_pipeline(data_cfg, pipe, threads))
    # Grain's advice for data in memory: no read threads (they only contend for the GIL).
    in_memory = lambda: iter(grain_pipeline(data_cfg, pipe, 0, in_memory=True))
    planned = lambda: iter(PlannedBatches(pipe.train_iter).to_iter_dataset(SEQUENTIAL))
    loaders, setups = {"ours": pipe.train_iter}, {"ours": ours_setup}
    for name, make in (("grain", native), ("grain(mem)", in_memory), ("grain(plan)", planned)):
        start = time.perf_counter()
        loaders[name] = make()
        setups[name] = time.perf_counter() - start + (ours_setup if name == "grain(plan)" else 0)

    totals = timed_turns(loaders, FLAGS.turns, FLAGS.batches)
    print_rates(totals, setups)

    k = FLAGS.compare
    fresh = copy.copy(pipe.train_iter)
    fresh.set_state({**fresh.get_state(), "epoch": 0, "position": 0})
    ours = [flat(next(fresh)) for _ in range(k)]
    from_memory = list(itertools.islice(in_memory(), k))
    few = min(k, 10)  # the data_source reads are slow
    print(
        f"(a) of the first {k} batches, identical to ours: grain(mem) "
        f"{same_batches(ours, from_memory)}/{k}, grain(plan) "
        f"{same_batches(ours, list(itertools.islice(planned(), k)))}/{k}; "
        f"grain = grain(mem) on the first {few}: "
        f"{same_batches(from_memory[:few], list(itertools.islice(native(), few)))}/{few}"
    )
    first, more = map(int, FLAGS.resume)
    print(
        f"(b) state saved after {first} batches, {more} more after restoring: "
        f"grain(mem) {resume_check(in_memory, first, more)}; "
        f"grain(plan) {resume_check(planned, first, more)}"
    )
    sliced = lambda index, count: iter(
        grain_pipeline(data_cfg, pipe, 0, in_memory=True, process_index=index, process_count=count)
    )
    print(
        "(c) own code needed: token-budget buckets and their state (TokenBuckets), the "
        "per-process slice of each global batch (in TokenBuckets; 2 processes: "
        f"{slices_reassemble(sliced, few)}), joined pairs (joined_pairs), the batch dict "
        "(padded_batch); no dummy rows here (the stream never ends an epoch, and the config "
        "drops remainders)"
    )
    print(
        f"parse + SentencePiece alone: {encode_cost(data_cfg, pipe):.0f} us per example "
        "(grain's us/row above minus this is Grain's own per-example cost)"
    )
    print(f"grain {grain.__version__}, jax {jax.__version__}")


if __name__ == "__main__":
    app.run(main, flags_parser=launch.flags_parser())
