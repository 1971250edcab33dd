r"""Decoding speed: cached greedy and beam search vs. full recomputation, tokens per second,
beside CTranslate2 (float32 and int8) running the same weights, and batch-1 latency.

    python -m benchmarks.decode                      # "small" (3+3, D 256), 64 x 32 tokens
    python -m benchmarks.decode --variant=d2l --beam_sizes=1,4
    python -m benchmarks.decode --noctranslate2      # JAX rows only

The model is random with `<eos>` disabled, so every sentence decodes exactly
`--decode_len` tokens and the work is the same in every run. The whole JAX search is one
compiled program. CTranslate2 gets the same parameters through `transformer_jax.export`
(`min_decoding_length = max_decoding_length`, `--ct2_threads` intra-op threads; int8 is
CTranslate2's weight quantisation on load). After one warm-up call each, the settings are
timed in turns (`--repeats` rounds, every setting once per round), so a slow spell of a
shared machine hits them alike; the table gives the best and the median. The latency rows
translate one `--latency_len`-token sentence into `--latency_len` tokens (greedy).

The process has `--cpu_devices` XLA:CPU devices (default 2, one per core of the project's
machines, as CTranslate2 gets `--ct2_threads` 2): the plain JAX rows run on the first, and
the rows "..., N CPU devices" split the batch over all of them as `experiments.translate
--cpu_devices=N` does (checked to give the same tokens).
"""

from __future__ import annotations

import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from transformer_jax import launch, runtime
from transformer_jax.runtime import host_memory

FLAGS = flags.FLAGS
flags.DEFINE_string("variant", "small", "Model variant from transformer_jax/nn/variants.py.")
flags.DEFINE_integer("vocab_size", 8000, "Source and target vocabulary size.")
flags.DEFINE_integer("batch", 64, "Sentences per batch.")
flags.DEFINE_integer("src_len", 32, "Source tokens per sentence.")
flags.DEFINE_integer("decode_len", 32, "Generated tokens per sentence.")
flags.DEFINE_list("beam_sizes", ["1", "4"], "Beam sizes (1 = greedy).")
flags.DEFINE_bool("recompute", True, "Also time greedy decoding by full recomputation.")
flags.DEFINE_integer("repeats", 3, "Timed rounds; every setting runs once per round.")
flags.DEFINE_bool("ctranslate2", True, "Also time CTranslate2 float32 and int8 on the weights.")
flags.DEFINE_integer("ct2_threads", 2, "CTranslate2 intra-op threads.")
flags.DEFINE_integer("latency_len", 15, "Batch-1 latency: source and output tokens (0 = off).")
flags.DEFINE_integer(
    "cpu_devices",
    2,
    "XLA:CPU devices of the process (runtime/cpu_devices.py); > 1 adds JAX rows that split the "
    "batch over them as `experiments.translate --cpu_devices` does (0 = JAX's one).",
)
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype of the model.")
flags.DEFINE_enum(
    "host_memory",
    "system",
    list(host_memory.MODES),
    "As a run config's host_memory; 'system', as the translate CLI runs (greedy was faster).",
)


def eos_free_params(cfg, seed: int = 0):
    """Host-filled random parameters (`transformer_jax.testing`: no random ops to compile),
    zero biases, and an output bias that keeps `<eos>` from ever winning."""
    from transformer_jax.data.vocab import EOS_ID
    from transformer_jax.testing import random_params

    params = random_params(cfg, seed, bias_std=0.0)
    bias = params["output"]["dense"]["bias"]
    params["output"]["dense"]["bias"] = bias.at[EOS_ID].set(-1e9)
    return params


def timed_in_turns(settings: list[tuple[str, object]], repeats: int) -> dict[str, list[float]]:
    """{name: seconds of each round}: one warm-up call each (compilation), then `repeats`
    rounds in which every setting runs once, in order."""
    for _, fn in settings:
        jax.block_until_ready(fn())
    times: dict[str, list[float]] = {name: [] for name, _ in settings}
    for _ in range(repeats):
        for name, fn in settings:
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return times


def ctranslate2_translators(cfg, params, directory: str) -> dict:
    """{"float32" | "int8": ctranslate2.Translator} of our parameters, converted once."""
    import ctranslate2
    from ctranslate2.converters.converter import Converter

    from transformer_jax.data.vocab import SPECIAL_TOKENS
    from transformer_jax.export.ctranslate2 import build_spec

    words = [*SPECIAL_TOKENS, *(f"t{i}" for i in range(len(SPECIAL_TOKENS), cfg.tgt_vocab_size))]
    spec = build_spec(cfg, jax.device_get(params), words, words)
    spec.config.add_source_eos = False  # both engines read the same S source tokens

    class _Spec(Converter):
        def _load(self):
            return spec

    _Spec().convert(directory, force=True)
    return {
        kind: ctranslate2.Translator(
            directory, device="cpu", compute_type=kind, intra_threads=FLAGS.ct2_threads
        )
        for kind in ("float32", "int8")
    }


def ct2_call(translator, src: np.ndarray, beam: int, length: int):
    """A no-argument function running CTranslate2 on `src` (B, S) for exactly `length` tokens."""
    tokens = [[f"t{int(t)}" for t in row] for row in src]

    def run():
        return translator.translate_batch(
            tokens,
            beam_size=beam,
            max_batch_size=len(tokens),
            min_decoding_length=length,
            max_decoding_length=length,
            max_input_length=0,
        )

    return run


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from configs import model as model_configs
    from transformer_jax.decoding import beam_decode, greedy_decode, sharded_decoder
    from transformer_jax.decoding.defaults import DEFAULTS
    from transformer_jax.nn import ModelConfig
    from transformer_jax.training.config import training_defaults

    process = training_defaults()  # the run config's process settings, from the flags
    process.host_memory = FLAGS.host_memory
    runtime.configure_process(process)  # before the first computation
    runtime.cpu_devices.apply(FLAGS.cpu_devices)

    section = model_configs.get_config(FLAGS.variant).to_dict()
    cfg = ModelConfig.from_dict(
        section, src_vocab_size=FLAGS.vocab_size, tgt_vocab_size=FLAGS.vocab_size
    ).replace(deterministic=True, dtype=FLAGS.dtype)
    params = jax.device_put(eos_free_params(cfg))
    rng = np.random.default_rng(1)
    src = jnp.asarray(rng.integers(4, FLAGS.vocab_size, (FLAGS.batch, FLAGS.src_len)), jnp.int32)
    src_len = jnp.full((FLAGS.batch,), FLAGS.src_len, jnp.int32)
    length = FLAGS.decode_len
    tokens = FLAGS.batch * length

    settings: list[tuple[str, object]] = []  # (name, no-argument function)
    tokens_of: dict[str, int] = {}
    searches = [(int(b), True) for b in FLAGS.beam_sizes]
    if FLAGS.recompute:
        searches.append((1, False))
    for beam, cached in searches:
        if beam == 1:
            fn = lambda c=cached: greedy_decode(  # noqa: E731
                cfg, params, src, src_len, max_decode_len=length, use_cache=c
            )
        else:
            fn = lambda b=beam: (
                beam_decode(  # noqa: E731
                    cfg,
                    params,
                    src,
                    src_len,
                    beam_size=b,
                    max_decode_len=length,
                    alpha=DEFAULTS["alpha"],
                ).tokens
            )
        out = np.asarray(fn())
        if beam == 1:
            assert (out != 0).all(), "the benchmark expects full-length outputs"
        name = ("greedy" if beam == 1 else f"beam {beam}") + ("" if cached else " (recompute)")
        settings.append((f"JAX {name}", fn))
        tokens_of[f"JAX {name}"] = tokens

    devices = jax.local_device_count()
    if devices > 1 and FLAGS.batch % devices == 0:
        # The user's path with --cpu_devices: each device decodes its share of the rows.
        for beam in (int(b) for b in FLAGS.beam_sizes):
            split = sharded_decoder(
                cfg, beam_size=beam, max_decode_len=length, alpha=DEFAULTS["alpha"]
            )
            fn = lambda d=split: d(params, src, src_len)  # noqa: E731
            name = "JAX " + ("greedy" if beam == 1 else f"beam {beam}")
            one_device = dict(settings)[name]
            assert np.array_equal(np.asarray(fn()), np.asarray(one_device())), name
            settings.append((f"{name}, {devices} CPU devices", fn))
            tokens_of[f"{name}, {devices} CPU devices"] = tokens

    latency = FLAGS.latency_len
    one = src[:1, :latency] if latency else None  # (1, latency) source
    if latency:
        one_len = jnp.full((1,), one.shape[1], jnp.int32)
        fn = lambda: greedy_decode(cfg, params, one, one_len, max_decode_len=latency)  # noqa: E731
        settings.append(("JAX greedy, batch 1", fn))
        tokens_of["JAX greedy, batch 1"] = latency

    with tempfile.TemporaryDirectory() as directory:
        if FLAGS.ctranslate2:
            host_src = np.asarray(src)
            translators = ctranslate2_translators(cfg, params, directory)
            # Same weights, same outputs: float32 greedy must agree with ours token for token.
            theirs = ct2_call(translators["float32"], host_src, 1, length)()
            ours = np.asarray(greedy_decode(cfg, params, src, src_len, max_decode_len=length))
            same = sum(
                r.hypotheses[0] == [f"t{int(t)}" for t in row]
                for r, row in zip(theirs, ours, strict=True)
            )
            print(f"CTranslate2 float32 greedy = JAX greedy on {same} of {len(ours)} sentences")
            for kind, translator in translators.items():
                for beam in sorted({int(b) for b in FLAGS.beam_sizes}):
                    name = f"CTranslate2 {kind} " + ("greedy" if beam == 1 else f"beam {beam}")
                    settings.append((name, ct2_call(translator, host_src, beam, length)))
                    tokens_of[name] = tokens
                if latency:
                    name = f"CTranslate2 {kind} greedy, batch 1"
                    settings.append((name, ct2_call(translator, np.asarray(one), 1, latency)))
                    tokens_of[name] = latency
        times = timed_in_turns(settings, FLAGS.repeats)

    print(
        f"\n{FLAGS.variant}: {cfg.num_encoder_layers}+{cfg.num_decoder_layers} layers, "
        f"D {cfg.model_dim}, V {FLAGS.vocab_size}; {FLAGS.batch} sentences x {FLAGS.src_len} "
        f"source tokens -> {length} tokens; {cfg.dtype}; "
        f"{jax.devices()[0].platform} x{jax.device_count()}; CTranslate2 "
        f"{FLAGS.ct2_threads} threads; {FLAGS.repeats} rounds in turns"
    )
    print("| search | best seconds | median seconds | output tokens/s (best) |\n|---|---|---|---|")
    for name, seconds in times.items():
        best, median = min(seconds), float(np.median(seconds))
        print(f"| {name} | {best:.4f} | {median:.4f} | {tokens_of[name] / best:,.0f} |")


if __name__ == "__main__":
    app.run(main, flags_parser=launch.flags_parser())
