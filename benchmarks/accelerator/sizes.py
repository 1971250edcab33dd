"""The model sizes the accelerator check measures, each a run config, and their batches.

    size = sizes.get("base")          # configs/benchmark.py:base, bfloat16, 384 x 64, V 32,000
    built = common.build_setting(size.config, size.setting)
    batch = size.batch(seed=0)        # the host batch every implementation gets

"readme" is the README run's own config (`configs/fra_eng.py`: D 128, 2+2, one tied 4,000
vocabulary, packed rows of 64 tokens), "base" the paper's base model in bfloat16 at ~25k
tokens a batch (the issue's speed setting), "d2l" and "small" `configs/benchmark.py`'s sizes;
the `--dry_run` sizes "readme_local" (`configs/fra_eng.py:runlocal`) and "tiny" go through
the same code in seconds on a CPU. Every batch is synthetic (ids 4..V-1, lengths drawn), so
no dataset is read; a packed size gets packed rows (data/packing.py's keys) as its run does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import ml_collections
import numpy as np

from benchmarks import common
from transformer_jax import launch
from transformer_jax.nn import variants

REPO = Path(__file__).resolve().parents[2]

# The speed setting of issue 38: Transformer-base in bfloat16, ~25k tokens a batch per side
# (384 rows x 64 tokens; lengths uniform in [32, 64], so ~18k of them real), a 32k vocabulary
# as WMT's (Flax examples/wmt's default vocab_size).
BASE = dict(rows=384, length=64, vocab=32_000, dtype="bfloat16")
TINY = dict(rows=8, length=16, vocab=256, dtype="bfloat16")  # --dry_run's stand-in for it


@dataclasses.dataclass(frozen=True)
class Size:
    """One measured size: our run config and the batch shape it is fed.

    rows: B, rows of a (global) batch; length: L, each row's width, source and target;
    vocab: V, one synthetic vocabulary for both sides; packed: several pairs a row.
    """

    name: str
    config: ml_collections.ConfigDict
    rows: int
    length: int
    vocab: int
    packed: bool

    @property
    def setting(self) -> common.Setting:
        """The `benchmarks.common` view of it (FLOPs, the torch model, the builder's V)."""
        m = self.config.model
        return common.Setting(
            self.name, m.num_encoder_layers, m.model_dim, m.num_heads, m.ffn_dim,
            self.length, self.rows, self.vocab,
        )  # fmt: skip

    def batch(self, seed: int) -> dict[str, np.ndarray]:
        """A host batch of B rows: padded pairs (`common.padded_batch`) or packed rows."""
        if self.packed:
            return packed_batch(self.rows, self.length, self.vocab, seed)
        return common.padded_batch(self.setting, seed)

    def describe(self) -> dict:
        """The sizes for the JSON report."""
        m = self.config.model
        return {
            "name": self.name,
            "layers": f"{m.num_encoder_layers}+{m.num_decoder_layers}",
            "D": m.model_dim,
            "H": m.num_heads,
            "F": m.ffn_dim,
            "V": self.vocab,
            "dtype": m.dtype,
            "batch": f"{self.rows} x {self.length} ({'packed rows' if self.packed else 'padded'})",
        }


def get(name: str) -> Size:
    """The size `name`: readme, readme_local, base, tiny, d2l or small."""
    if name in ("readme", "readme_local"):
        config = launch.load_config_file(
            f"{REPO / 'configs' / 'fra_eng.py'}{':runlocal' if name == 'readme_local' else ''}"
        )
        d = config.data
        packed = bool(d.packing)
        # A packed run's batches: batch_tokens / width rows of the longest length, if set.
        rows = d.batch_tokens // d.max_src_len if d.batch_tokens else d.batch_size
        return Size(name, config, rows, d.max_src_len, d.vocab_size, packed)
    if name in ("base", "tiny"):
        spec = BASE if name == "base" else TINY
        config = launch.load_config_file(f"{REPO / 'configs' / 'benchmark.py'}:base")
        if name == "tiny":
            config.model = variants.model_section("tiny")
        config.model.dtype = spec["dtype"]
        config.data.max_src_len = config.data.max_tgt_len = spec["length"]
        config.data.batch_size, config.data.vocab_size = spec["rows"], spec["vocab"]
        return Size(name, config, spec["rows"], spec["length"], spec["vocab"], False)
    if name in ("d2l", "small"):
        config = launch.load_config_file(f"{REPO / 'configs' / 'benchmark.py'}:{name}")
        d = config.data
        return Size(name, config, d.batch_size, d.max_src_len, d.vocab_size, False)
    raise ValueError(f"unknown size {name!r}; choose readme, readme_local, base, tiny, d2l, small.")


def with_gradients(size: Size, gradients: str) -> Size:
    """The same size with the run config's `gradients` rule set ("custom_vjp" | "autodiff"),
    and after a "+" any more top-level run-config keys: "autodiff+parallelism=shard_map"."""
    gradients, *settings = gradients.split("+")
    config = ml_collections.ConfigDict(size.config.to_dict())
    config.gradients = gradients
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or key not in config or isinstance(config[key], ml_collections.ConfigDict):
            raise ValueError(f"{setting!r}: not a top-level run-config key=value")
        config[key] = type(config[key])(value) if config[key] is not None else value
    return dataclasses.replace(size, config=config)


def packed_batch(rows: int, width: int, vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Packed rows (data/packing.py's layout) of random pairs, each side 3..width/4 tokens.

    Pair k of a row puts its source at the next free place of the row's source side and its
    target at the next free place of the target side, segment k on both (0 = padding),
    positions restarting at 0; tgt_in is `<bos>` and the target shifted within each pair.
    Returns src / src_segment / src_position (B, L), src_len (B,) (real source tokens of the
    row), tgt_in / tgt_out / tgt_segment / tgt_position (B, L) int32, tgt_weight (B, L).
    """
    rng = np.random.default_rng(seed)
    out = {k: np.zeros((rows, width), np.int32) for k in ("src", "tgt_in", "tgt_out")}
    for key in ("src_segment", "src_position", "tgt_segment", "tgt_position"):
        out[key] = np.zeros((rows, width), np.int32)
    longest = max(3, width // 4)
    for r in range(rows):
        s_at = t_at = 0
        k = 1
        while True:
            ls, lt = rng.integers(3, longest + 1, size=2)
            if s_at + ls > width or t_at + lt > width:
                break
            src = slice(s_at, s_at + ls)
            tgt = slice(t_at, t_at + lt)
            out["src"][r, src] = rng.integers(4, vocab, size=ls)
            out["src_segment"][r, src], out["src_position"][r, src] = k, np.arange(ls)
            tokens = rng.integers(4, vocab, size=lt)
            out["tgt_out"][r, tgt] = tokens
            out["tgt_in"][r, tgt] = np.concatenate([[1], tokens[:-1]])  # <bos> = 1
            out["tgt_segment"][r, tgt], out["tgt_position"][r, tgt] = k, np.arange(lt)
            s_at, t_at, k = s_at + ls, t_at + lt, k + 1
    out["src_len"] = (out["src_segment"] > 0).sum(axis=1).astype(np.int32)
    out["tgt_weight"] = (out["tgt_segment"] > 0).astype(np.float32)
    return out
