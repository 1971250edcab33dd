r"""English -> French on the d2l fra-eng corpus (tatoeba/manythings.org).

Launch (the README's first command):

    python -m experiments.train --config=configs/fra_eng.py --workdir=runs/fra_eng

Recipes, by string argument (big_vision style), each with its row in benchmarks/README.md's
"Current results" (the measured figures):

    (none) or default  the README run: the `readme` model, 1,500 steps  row "README run"
    d2l                the book's §11.7.5 setting                        row "the book's check"
    deep_sampled       README model 3+3, 8,000 steps, subword sampling   row "deep_sampled"
    variant=<size>     a model size of nn/variants.py (small, base, ...)  row "train step"
    ...,runlocal       any of these tiny: seconds, for a laptop or a test

`hour`, the old name of `deep_sampled` (the 60-minute recipe; a budget, not a recipe), is
still accepted, with a note on stderr. A recipe is data: the dicts below, laid in order onto
`training_defaults()` and `data_config()`; each setting names the benchmarks/LOG.md section
that holds its evidence. Steps, not minutes, define a recipe (a slower CPU runs longer).
Any key can be overridden: `--config.num_train_steps=500 --config.data.batch_size=64`.
Re-running the same command resumes from the latest checkpoint in the workdir.
"""

from __future__ import annotations

import difflib
import sys

import ml_collections

from transformer_jax.data.config import data_config
from transformer_jax.nn import variants as model_variants
from transformer_jax.training.config import training_defaults

# Any model size's recipe (`variant=small`): SentencePiece, whole pairs, the paper's schedule.
SIZES = dict(
    data=dict(
        # At D = 128 the output softmax dominates the step time: small vocabularies, one a language.
        tokenizer="sentencepiece", shared_vocab=False, vocab_size=2000,
        # Whole pairs: 64 tokens hold 99.99 % of them; the rare longer ones are skipped, never cut.
        max_src_len=64, max_tgt_len=64, long_pairs="skip",
        bucket_boundaries=(8, 12, 16, 24, 32, 64), num_eval_examples=1000,
        batch_size=128,  # rows of the eval batches (and of training without tokens)
    ),
    label_smoothing=0.1,  # the paper's (LOG.md, "Label smoothing for the README run (0.1 kept)")
    schedule="paper", learning_rate=1.0, warmup_steps=400,  # D-scaled n^-0.5: no run length
    num_train_steps=3600, eval_every_steps=1800, log_every_steps=200, checkpoint_every_steps=600,
    eval=dict(num_bleu_examples=100),
)  # fmt: skip

# The README run (`default`), over SIZES: >= 36 BLEU in as few minutes as possible (issue 15).
README = dict(
    model="readme",  # D 128, 2+2, no dropout, one tied table, norm first (nn/variants.py)
    data=dict(
        shared_vocab=True, vocab_size=4000,  # LOG.md, "a joint 4,000-piece vocabulary ..."
        batch_tokens=2048,  # fairseq's --max-tokens: +2.2 BLEU over 128 rows ("Levers of issue 15")
        concat_fraction=0.2,  # joined pairs, data/augment.py (LOG.md, "Joined pairs")
        packing=True, bucketing=False,  # one compiled step (LOG.md, "packed rows (`data.packing`")
    ),
    # Warm-up to 8e-3, linear decay to 0 (LOG.md, "Norm first at a peak of 8e-3 for the README
    # run"); 1,500 packed steps with beam 4 fit 6 minutes (LOG.md, "Beam 4 for the README run").
    schedule="linear", learning_rate=8e-3, num_train_steps=1500, eval_every_steps=750,
    # Beam 4 everywhere; no validation BLEU (~10 s; LOG.md, "the README run in 6 minutes?").
    eval=dict(beam_size=4, num_bleu_examples=0),
)  # fmt: skip

# The 60-minute recipe (`deep_sampled`), over README: >= 45 BLEU in an hour (issue 15).
DEEP_SAMPLED = dict(
    model=dict(num_encoder_layers=3, num_decoder_layers=3),  # LOG.md, "three layers a side"
    num_train_steps=8000, eval_every_steps=4000, checkpoint_every_steps=2000,
    data=dict(
        sp_sampling_alpha=0.5,  # LOG.md, "subword regularization, α 0.5, 15,000 steps"
        batch_tokens=4096,  # LOG.md, "the hour in batches of ~4,096 tokens (kept)"
        concat_fraction=0.0,  # LOG.md, "the 3+3 hour with joined pairs (not kept)"
    ),
    # Chosen on the validation split (LOG.md, "the hour's beam width", "the sampled hour's ...").
    eval=dict(alpha=1.0, beam_size=6, num_bleu_examples=100),
)  # fmt: skip

# d2l §11.7.5 as the book runs it: load_data_nmt(num_examples=600) keeps lines 0..600, its
# DataLoader the last partial batch: 10 batches of 64 an epoch (LOG.md, "matching the book's 601").
D2L = dict(
    model="d2l",
    data=dict(
        train_split="full[:601]", drop_remainder=False, batch_size=64, bucketing=False,
        tokenizer="word", shared_vocab=False, min_freq=2,  # one Vocab per language
        max_src_len=10, max_tgt_len=10, long_pairs="truncate",  # num_steps 10, truncate_pad
        num_eval_examples=1000,
    ),
    # Adam at 0.005 (optax defaults otherwise), gradient clipping θ = 1, plain masked CE.
    optimizer="adam", adam_b2=0.999, adam_eps=1e-8, schedule="constant", learning_rate=0.005,
    clip_norm=1.0, label_smoothing=0.0, num_epochs=200,
    # Hundreds of tiny ops: ten steps a call, YNNPACK fusions (LOG.md, "the d2l step").
    steps_per_call=10, xla_flags="--xla_cpu_experimental_ynn_fusion_type=dot,eltwise,reduce",
    host_memory="system",  # "reuse" made its step slower (runtime/host_memory.py)
    log_every_steps=100, eval_every_steps=500, checkpoint_every_steps=500,
    eval=dict(num_bleu_examples=100),
)  # fmt: skip

# `runlocal`, laid last: seconds, not minutes, on a slice of the corpus in word tokens.
RUNLOCAL = dict(
    data=dict(
        train_split="train[:2000]", tokenizer="word",
        sp_sampling_alpha=0.0,  # words have one segmentation
        batch_size=32, batch_tokens=0, num_eval_examples=64,  # 32 rows, whatever the bucket
    ),
    num_epochs=0, num_train_steps=20, warmup_steps=10, log_every_steps=5, eval_every_steps=10,
    checkpoint_every_steps=10,
    eval=dict(num_bleu_examples=16, num_test_examples=64, beam_size=1),  # greedy: one decoder
)  # fmt: skip
# Then, by recipe: whole pairs of up to 24 words (the slice's longest skipped; d2l keeps its
# 10), and the tiny model for the README and book models (post-norm: 5e-3, not the README's 8e-3).
RUNLOCAL_PAIRS = dict(data=dict(max_src_len=24, max_tgt_len=24, bucket_boundaries=(12,)))
RUNLOCAL_TINY = dict(model="tiny", learning_rate=5e-3)

# name: (its layers over the defaults, and what `runlocal` lays over them).
RECIPES = {
    "default": ((SIZES, README), (RUNLOCAL, RUNLOCAL_PAIRS, RUNLOCAL_TINY)),
    "d2l": ((D2L,), (RUNLOCAL, RUNLOCAL_TINY)),
    "deep_sampled": ((SIZES, README, DEEP_SAMPLED), (RUNLOCAL, RUNLOCAL_PAIRS, RUNLOCAL_TINY)),
}
DEPRECATED = {"hour": "deep_sampled"}  # old name: new name, accepted for one release
# The recipes, then nn/variants.py's sizes (d2l is both; `readme` is `default`'s model).
VARIANTS = tuple(v for v in dict.fromkeys((*RECIPES, *model_variants.VARIANTS)) if v != "readme")


def _parse(arg: str | None) -> dict[str, str | bool]:
    """ "d2l" | "variant=small,runlocal" -> {"variant": ..., "runlocal": bool}."""
    out: dict[str, str | bool] = {"variant": "default", "runlocal": False}
    for part in filter(None, (arg or "").split(",")):
        key, _, value = part.partition("=")
        if key == "runlocal" and not value:
            out["runlocal"] = True
        elif (key == "variant" and value) or (not value and key in (*VARIANTS, *DEPRECATED)):
            out["variant"] = value or key
        else:
            raise ValueError(
                f"Bad config argument {part!r} in {arg!r}{_did_you_mean(key)}: use a variant "
                f"name {list(VARIANTS)}, 'variant=<name>' and/or 'runlocal'."
            )
    if (old := str(out["variant"])) in DEPRECATED:  # one line on stderr, then the new name
        out["variant"] = new = DEPRECATED[old]
        print(f"configs/fra_eng.py: {old!r} is deprecated; use {new!r} (the same recipe).",
              file=sys.stderr)  # fmt: skip
    if out["variant"] not in VARIANTS:
        raise ValueError(
            f"Unknown variant {out['variant']!r}{_did_you_mean(str(out['variant']))}; choose "
            f"one of {list(VARIANTS)}."
        )
    return out


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name, [*VARIANTS, "runlocal"], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _apply(c: ml_collections.ConfigDict, overrides: dict) -> None:
    """Lays `overrides` onto `c`: a section's dict merges, a model size name replaces `c.model`."""
    for key, value in overrides.items():
        if key == "model" and isinstance(value, str):
            c.model = model_variants.model_section(value)
        elif isinstance(value, dict):
            c[key].update(value)
        else:
            c[key] = value


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The run config of recipe `arg` (module docstring): defaults, then its layers."""
    args = _parse(arg)
    name = str(args["variant"])
    # A model size without a recipe of its own takes SIZES' recipe.
    layers, runlocal = RECIPES.get(name, ((SIZES, {"model": name}), (RUNLOCAL, RUNLOCAL_PAIRS)))
    c = training_defaults()
    c.data = data_config()
    for overrides in (*layers, *(runlocal if args["runlocal"] else ())):
        _apply(c, overrides)
    return c


SWEEPS = ("norm_x_attention", "norm_placement", "model_size")


def get_hyper(h, name: str) -> list[dict]:
    """Sweeps of this config (`python -m experiments.sweep --config=... --sweep=NAME`).

    norm_x_attention: d2l §11.7 asks whether additive attention can replace scaled
      dot-product attention, and the Step-by-Step chapter moves the norm first; run on
      `configs/fra_eng.py:d2l`, this grid answers both by experiment.
    """
    if name == "norm_x_attention":
        return h.product([h.sweep("model.norm_placement", ["post", "pre"]),
                          h.sweep("model.attention_kind", ["dot", "additive"])])  # fmt: skip
    if name == "norm_placement":
        return h.sweep("model.norm_placement", ["post", "pre", "rezero"])
    if name == "model_size":
        return h.zip([h.sweep("model.model_dim", [64, 128, 256]),
                      h.sweep("model.ffn_dim", [256, 512, 1024])])  # fmt: skip
    raise h.unknown(name, SWEEPS)
