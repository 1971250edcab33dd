"""The decoding flags `translate`, `evaluate` and `serve` share, defined once.

`define_decoding_flags()` defines them in a launcher: the run (`--workdir`), which
parameters (`--step`, `--average_last`), the search (`--beam_size`, `--alpha`,
`--max_decode_len`, `--segment_len`), the decoding options (`--nbest`, `--temperature`,
`--top_k`, `--top_p`, `--seed`, `--prefix`) and `--cpu_devices`. `decoding_flag_values()`
and `decoding_option_values()` read them back as keywords of `translate_workdir` and
`evaluate_workdir`.
"""

from __future__ import annotations

from typing import Any

from absl import flags

# --help lists these flags under the module launchers call `define_decoding_flags` from
# (`transformer_jax.launch`), as it did before this module was split out of it.
HELP_MODULE = "transformer_jax.launch"

# What `decoding_flag_values()` passes on, named as `translate_workdir`/`evaluate_workdir` take it.
DECODING_KEYWORDS = ("step", "average_last", "beam_size", "alpha", "max_decode_len", "segment_len")
# What `decoding_option_values()` passes on: the `DecodeOptions` fields beyond the search's.
OPTION_KEYWORDS = ("nbest", "temperature", "top_k", "top_p", "seed", "prefix")


def define_decoding_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """The flags `experiments.translate` and `experiments.evaluate` share, defined once: the
    run (`--workdir`), which parameters (`--step`, `--average_last`), the search
    (`--beam_size`, `--alpha`, `--max_decode_len`, `--segment_len`), the decoding options
    (`--nbest`, `--temperature`, `--top_k`, `--top_p`, `--seed`, `--prefix`) and
    `--cpu_devices`. A search flag left unset (None) means the run's own setting: its config's
    `eval` section, whose defaults are the table in `decoding/defaults.py`."""
    fv = {"flag_values": flag_values, "module_name": HELP_MODULE}
    flags.DEFINE_string(
        "workdir",
        None,
        "Training workdir (config, tokenizers, checkpoints); DIR@STEP for one checkpoint; "
        "several, comma-separated, decode as an ensemble (the mean of their log-probabilities "
        "each step; they must share vocabularies).",
        **fv,
    )
    flags.DEFINE_integer("step", None, "Checkpoint step; default the latest.", **fv)
    flags.DEFINE_integer(
        "average_last",
        1,
        "Average the params of the last N checkpoints (ending at --step if given); "
        "1 = no averaging.",
        **fv,
    )
    flags.DEFINE_integer(
        "beam_size",
        None,
        "1 = greedy search; > 1 = beam search. Default: the run's eval.beam_size.",
        **fv,
    )
    flags.DEFINE_float(
        "alpha",
        None,
        "Beam length penalty exponent ((5 + len) / 6)^alpha; default the run's eval.alpha.",
        **fv,
    )
    flags.DEFINE_integer(
        "max_decode_len",
        None,
        "Most tokens per translation; default eval.max_len_a * (source tokens) + eval.max_len_b.",
        **fv,
    )
    flags.DEFINE_integer(
        "segment_len",
        None,
        "Translate an input of several sentences longer than this many tokens (with <eos>) in "
        "parts of whole sentences; 1 = sentence by sentence, 0 = whole; default "
        "eval.segment_len. Formerly --split_len (still accepted, with a note).",
        **fv,
    )
    # How to decode (`decoding.options.DecodeOptions`; unset = its default, the table in
    # decoding/defaults.py): n-best, sampling, a forced prefix.
    flags.DEFINE_integer(
        "nbest",
        None,
        "Write the N best translations of each line as TSV, one per line: "
        "line_index<TAB>rank<TAB>score<TAB>translation (line_index from 0, rank from 1 = the "
        "best, score = log P / ((5 + len) / 6)^alpha as the search ranks them); N <= "
        "--beam_size, or N samples with --temperature > 0. evaluate scores the best.",
        **fv,
    )
    flags.DEFINE_float(
        "temperature",
        None,
        "0 = search (greedy or beam, the default); > 0 = sample each token from "
        "softmax(logits / temperature) (--beam_size is then unused).",
        **fv,
    )
    flags.DEFINE_integer(
        "top_k", None, "Sampling: draw from the k most probable tokens only; 0 = all.", **fv
    )
    flags.DEFINE_float(
        "top_p",
        None,
        "Sampling: draw from the smallest set of most probable tokens whose probability "
        "reaches p (nucleus sampling); 1 = all.",
        **fv,
    )
    flags.DEFINE_integer(
        "seed", None, "Sampling's random seed (default 0): the same seed, the same output.", **fv
    )
    flags.DEFINE_string(
        "prefix",
        None,
        "Forced start of every translation (text, prepared as the inputs); the search "
        "continues after it.",
        **fv,
    )
    flags.DEFINE_integer(
        "cpu_devices",
        0,
        "XLA:CPU devices to split each decoding batch over (the same tokens; e.g. the number "
        "of cores: 12 % faster on 2 cores); 0 = JAX's default, one. See runtime/cpu_devices.py.",
        **fv,
    )


def decoding_flag_values(flag_values: flags.FlagValues = flags.FLAGS) -> dict[str, Any]:
    """The parsed `DECODING_KEYWORDS` flags: keywords of `translate_workdir`, `evaluate_workdir`."""
    return {name: flag_values[name].value for name in DECODING_KEYWORDS}


def decoding_option_values(flag_values: flags.FlagValues = flags.FLAGS) -> dict[str, Any]:
    """The parsed `OPTION_KEYWORDS` flags (None = unset): `DecodeOptions` fields, keywords of
    `translate_workdir` and `evaluate_workdir`."""
    return {name: flag_values[name].value for name in OPTION_KEYWORDS}
