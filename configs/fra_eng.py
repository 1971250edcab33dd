r"""English -> French on the d2l fra-eng corpus (tatoeba/manythings.org).

Launch (the README's first command; ~6 minutes on 2 idle CPU cores):

    python -m experiments.train --config=configs/fra_eng.py --workdir=runs/fra_eng

Variants, by string argument (big_vision style), combinable with commas:

    --config=configs/fra_eng.py:d2l                 the book's §11.7.5 setting
    --config=configs/fra_eng.py:variant=small       another model size (configs/model.py)
    --config=configs/fra_eng.py:runlocal            everything tiny, for a laptop or a test
    --config=configs/fra_eng.py:variant=tiny,runlocal

Any key can be overridden: `--config.num_train_steps=500 --config.data.batch_size=64`.
Re-running the same command resumes from the latest checkpoint in the workdir.
"""

from __future__ import annotations

import ml_collections

from configs import model as model_configs
from transformer_jax.data.config import data_config
from transformer_jax.training.config import training_defaults

VARIANTS = ("default", "d2l", *model_configs.VARIANTS)


def _parse(arg: str | None) -> dict[str, str | bool]:
    """ "d2l" | "variant=small,runlocal" -> {"variant": ..., "runlocal": bool}."""
    out: dict[str, str | bool] = {"variant": "default", "runlocal": False}
    for part in filter(None, (arg or "").split(",")):
        key, _, value = part.partition("=")
        if key == "runlocal" and not value:
            out["runlocal"] = True
        elif key == "variant" and value:
            out["variant"] = value
        elif not value and key in VARIANTS:
            out["variant"] = key
        else:
            raise ValueError(
                f"Bad config argument {part!r} in {arg!r}: use a variant name {list(VARIANTS)}, "
                "'variant=<name>' and/or 'runlocal'."
            )
    if out["variant"] not in VARIANTS:
        raise ValueError(f"Unknown variant {out['variant']!r}; choose one of {list(VARIANTS)}.")
    return out


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = _parse(arg)
    variant = args["variant"]
    c = training_defaults()
    c.data = data_config()

    if variant == "d2l":
        # d2l §11.7.5: 2+2 layers, D 32, H 4, F 64, dropout 0.1; num_steps 10, batch 64;
        # Adam lr 0.005 (optax defaults otherwise), grad clipping θ = 1, 200 epochs on the
        # first pairs of fra.txt, word vocabulary with min_freq 2, plain masked CE.
        # load_data_nmt(num_examples=600) keeps lines 0..600 (tokenize_nmt breaks only when
        # i > 600): 601 pairs. Its DataLoader keeps the last partial batch (drop_last=False):
        # 10 batches of 64 an epoch (the last with 25 pairs), 2,000 steps in 200 epochs.
        c.model = model_configs.get_config("d2l")
        c.data.train_split = "full[:601]"
        c.data.drop_remainder = False
        c.data.tokenizer = "word"
        c.data.shared_vocab = False  # the book builds one Vocab per language
        c.data.min_freq = 2
        c.data.max_src_len = c.data.max_tgt_len = 10
        c.data.long_pairs = "truncate"  # the book's truncate_pad (num_steps = 10)
        c.data.batch_size = 64
        c.data.bucketing = False
        c.optimizer, c.adam_b2, c.adam_eps = "adam", 0.999, 1e-8
        c.schedule, c.learning_rate = "constant", 0.005
        c.clip_norm = 1.0
        c.label_smoothing = 0.0
        c.num_epochs = 200
        # The d2l step is hundreds of tiny ops: ten steps per call (lax.scan) and YNNPACK
        # for elementwise/reduce fusions too (benchmarks/README.md, "the d2l step").
        c.steps_per_call = 10
        c.xla_flags = "--xla_cpu_experimental_ynn_fusion_type=dot,eltwise,reduce"
        # Its temporaries are small, so glibc reuses them anyway, and the one shared arena
        # of "reuse" made its step 29-37 % slower (training/host_memory.py).
        c.host_memory = "system"
        c.log_every_steps = 100
        c.eval_every_steps = c.checkpoint_every_steps = 500
        c.data.num_eval_examples = 1000
        c.eval.num_bleu_examples = 100
    else:
        # The README's run: D 128, 2+2 layers, SentencePiece 2k per side, the machine's fast
        # compute dtype ("auto": bfloat16 with AMX, float32 without) and no dropout (a run of
        # minutes is far from overfitting 150k pairs; dropout cost a third of the step and
        # slowed learning). `python -m benchmarks.time_to_bleu` on 2 CPU cores of an AMX
        # machine, sacreBLEU on 1000 test pairs, greedy (benchmarks/README.md):
        #   bf16, dropout 0:   BLEU 28.1 at 5 min (1,201 steps), 31.6 at 10 min (1,901)
        #   bf16, dropout 0.1: BLEU 19.7 at 5 min (801 steps),   28.1 at 10 min (1,691)
        # On an AVX512 Xeon without AMX ("auto" = float32 there), dropout 0:
        #   BLEU 27.8 at 5 min (1,256 steps), 35.3 at 10, 38.4 at 20, 40.2 at 30, 40.3 at 60.
        # This run as the README launches it, on an idle machine: 5m58s wall in all, 1,600
        # steps at ~5.7 steps/s; validation NLL 1.51 / BLEU 24.3 @800, NLL 1.19 (ppl 3.29),
        # accuracy 0.733, BLEU 34.5 @1600 (100 pairs, greedy). (The float32, dropout 0.1,
        # 800-step run of the first version: BLEU 16.4 at 10m46s on a loaded machine.)
        c.model = model_configs.get_config("d2l" if variant == "default" else variant)
        if variant == "default":
            c.model.num_encoder_layers = c.model.num_decoder_layers = 2
            c.model.model_dim, c.model.num_heads, c.model.ffn_dim = 128, 4, 512
            c.model.max_len = 64
            c.model.dtype = "auto"  # bfloat16 on TPU/GPU/AMX CPUs, float32 elsewhere
            c.model.dropout_rate = c.model.attention_dropout_rate = 0.0
        c.data.tokenizer = "sentencepiece"
        c.data.vocab_size = 2000  # the output softmax dominates the step time at D = 128
        c.data.shared_vocab = False  # one SentencePiece model per language
        # Whole pairs: 64 tokens hold 99.99 % of them (the log prints the percentiles);
        # the rare longer ones are skipped, never cut.
        c.data.max_src_len = c.data.max_tgt_len = 64
        c.data.long_pairs = "skip"
        c.data.bucket_boundaries = (8, 12, 16, 24, 32, 64)
        c.data.batch_size = 128
        # A fixed budget: warm up to 5e-3, then decay linearly to 0 at the last step. At 3,600
        # steps this beat the paper's n^-0.5 decay by 1.9 BLEU (benchmarks/README.md).
        c.schedule, c.learning_rate, c.warmup_steps = "linear", 5e-3, 400
        c.label_smoothing = 0.1
        c.num_train_steps = 3600
        c.log_every_steps = 200
        c.eval_every_steps = 1800
        c.checkpoint_every_steps = 600
        c.data.num_eval_examples = 1000
        c.eval.num_bleu_examples = 100

    if args["runlocal"]:
        # Seconds, not minutes: a tiny model on a slice of the corpus.
        c.model = model_configs.get_config("tiny" if variant in ("default", "d2l") else variant)
        c.data.train_split = "train[:2000]"
        c.data.tokenizer = "word"
        if variant == "d2l":
            c.data.max_src_len = c.data.max_tgt_len = 10
        else:  # whole pairs of up to 24 word tokens (the slice's longest are skipped)
            c.data.max_src_len = c.data.max_tgt_len = 24
            c.data.bucket_boundaries = (12,)
        c.data.batch_size = 32
        c.data.num_eval_examples = 64
        c.num_epochs, c.num_train_steps = 0, 20
        c.warmup_steps = 10
        c.log_every_steps = 5
        c.eval_every_steps = c.checkpoint_every_steps = 10
        c.eval.num_bleu_examples = 16
        c.eval.num_test_examples = 64
    return c


SWEEPS = ("norm_x_attention", "norm_placement", "model_size")


def get_hyper(h, name: str) -> list[dict]:
    """Sweeps of this config (`python -m experiments.sweep --config=... --sweep=NAME`).

    norm_x_attention: d2l §11.7 asks whether additive attention can replace scaled
      dot-product attention, and the Step-by-Step chapter moves the norm first; run on
      `configs/fra_eng.py:d2l`, this grid answers both by experiment.
    """
    if name == "norm_x_attention":
        return h.product(
            [
                h.sweep("model.norm_placement", ["post", "pre"]),
                h.sweep("model.attention_kind", ["dot", "additive"]),
            ]
        )
    if name == "norm_placement":
        return h.sweep("model.norm_placement", ["post", "pre", "rezero"])
    if name == "model_size":
        return h.zip(
            [
                h.sweep("model.model_dim", [64, 128, 256]),
                h.sweep("model.ffn_dim", [256, 512, 1024]),
            ]
        )
    raise h.unknown(name, SWEEPS)
