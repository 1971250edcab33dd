r"""What a launcher checks before anything is built: its flags, the config file, the overrides.

Every mistake on a command line becomes one `FATAL: ...` line on stderr (exit code 2, no
traceback) naming the bad value and the valid choices, before a workdir is created or any
data is prepared: a missing config file, a variant typo, `--config.x=y` naming an unknown
key or giving a non-number for a numeric key, an unknown flag, a missing required flag. The
config's values are checked after that, once, by `training.validate_config` (raising
`ConfigError`, which a launcher prints with `fatal`).

ml_collections' `config_flags` loads the config file and applies the overrides while absl
parses the flags, and reports a mistake there as a long traceback (or, for a missing file,
only when the config is first read). So `flags_parser` checks the same things first, with
the messages below, and then lets absl parse. Use it in any launcher:

    config_flags.DEFINE_config_file("config", None, "Run config file, e.g. ...")
    flags.DEFINE_string("workdir", None, "Directory of the run, e.g. --workdir=runs/fra_eng.")
    ...
    def main(argv):
        try:
            training.validate_config(FLAGS.config)
        except training.ConfigError as error:
            launch.fatal(f"invalid config: {error}")

    if __name__ == "__main__":
        app.run(main, flags_parser=launch.flags_parser(required=("config", "workdir")))

`print_config(config)` prints a resolved config (for `--print_config`).
`quiet_library_logs()` keeps orbax's routine records out of a launcher's stderr.
`define_decoding_flags()` defines the flags `translate` and `evaluate` share (the run, the
checkpoint, the search); `decoding_flag_values()` reads them back as keywords.
"""

from __future__ import annotations

import difflib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import ml_collections
from absl import flags

from transformer_jax.training.config import ConfigError
from transformer_jax.training.config_files import (
    SHIPPED_CONFIGS,
    load_config_file,
    resolve_config_path,
)

__all__ = [  # the config-file helpers live in training.config_files; launchers find them here
    "DECODING_KEYWORDS",
    "OPTION_KEYWORDS",
    "SHIPPED_CONFIGS",
    "check_config_args",
    "check_overrides",
    "decoding_flag_values",
    "decoding_option_values",
    "define_decoding_flags",
    "fatal",
    "flags_parser",
    "launcher_help",
    "load_config_file",
    "print_config",
    "quiet_library_logs",
    "resolve_config_args",
    "resolve_config_path",
]


def fatal(message: str) -> NoReturn:
    """Ends the process with one `FATAL:` line on stderr and exit code 2."""
    print(f"FATAL: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


def flags_parser(
    *,
    required: Sequence[str] = (),
    unless: str | None = None,
    config_flag: str = "config",
    flag_values: flags.FlagValues = flags.FLAGS,
    module: str | None = None,
) -> Callable[[list[str]], list[str]]:
    """An absl `flags_parser` for `app.run` that turns every flag mistake into a FATAL line.

    `required`: flags that must be given, unless the boolean flag `unless` is set (e.g.
    `--print_config` needs no `--workdir`). `config_flag`: the `DEFINE_config_file` flag.
    `--help` (and `--helpfull`) print `launcher_help(module)` and exit 0; `module` is the
    launcher's module name, by default the module that calls `flags_parser`.
    """
    module = module or sys._getframe(1).f_globals["__name__"]

    def parse(argv: list[str]) -> list[str]:
        asked = _help_asked(argv[1:])
        if asked:
            print(launcher_help(module, full=asked == "full", flag_values=flag_values))
            sys.exit(0)
        argv = rename_deprecated_flags(argv, flag_values)
        argv = resolve_config_args(argv, config_flag=config_flag)
        try:
            check_config_args(argv, config_flag=config_flag)
        except ConfigError as error:
            fatal(str(error))
        try:
            rest = flag_values(argv)
        except (flags.Error, ValueError, TypeError, KeyError, AttributeError, OSError) as error:
            fatal(_last_line(error))
        if unless is None or not flag_values[unless].value:
            for name in required:
                if flag_values[name].value in (None, ""):
                    fatal(f"--{name} is missing: {flag_values[name].help}")
        return rest

    return parse


# absl's own help flags: it prints only the flags of `__main__`, which is absl's app module
# (no flags) under a console command, and exits 1.
_SHORT_HELP = ("--help", "-help", "-?", "--helpshort", "-helpshort")
_FULL_HELP = ("--helpfull", "-helpfull")
_PROJECT_PACKAGES = ("transformer_jax", "experiments", "benchmarks", "configs")


def _help_asked(args: Sequence[str]) -> str | None:
    """ "short" or "full" if `args` ask for help (before a `--`), else None."""
    for arg in args:
        if arg == "--":
            return None
        if arg in _FULL_HELP:
            return "full"
        if arg in _SHORT_HELP:
            return "short"
    return None


def launcher_help(
    module: str, *, full: bool = False, flag_values: flags.FlagValues = flags.FLAGS
) -> str:
    """A launcher's `--help`: its module docstring, then its own flags and the shared ones it
    defined through the project's modules (e.g. `define_decoding_flags`), whether it runs as
    `python -m` or as an installed console command. `full` adds every other flag (absl, JAX,
    orbax, TFDS)."""
    by_module = flag_values.flags_by_module_dict()
    # A module run as `python -m` registers its flags under sys.argv[0] (absl's rule).
    own_keys = [module, sys.argv[0]] if module == "__main__" else [module]
    shared = sorted(k for k in by_module if k.partition(".")[0] in _PROJECT_PACKAGES)
    ours = [k for k in dict.fromkeys([*own_keys, *shared]) if k in by_module]
    doc = (getattr(sys.modules.get(module), "__doc__", None) or "").strip("\n")
    parts = [doc or f"USAGE: {module} [flags]", "", "flags:"]
    parts += [flag_values.module_help(k) for k in ours]
    if full:
        others = sorted(k for k in by_module if k not in ours)
        parts += ["", "Flags of the libraries:"] + [flag_values.module_help(k) for k in others]
    else:
        parts += ["", "Try --helpfull for the flags of the libraries too (absl, JAX, orbax, TFDS)."]
    return "\n".join(parts)


# Warnings orbax logs whenever a checkpoint is opened read-only, as translate, evaluate,
# export and averaging do on purpose: they report no problem, and a user reads them as one.
_READ_ONLY_NOTICES = (
    "CheckpointManagerOptions.read_only=True",
    "Given directory is read only",
)
# JAX's INFO record of each backend plugin it tries and does not find (xla_bridge.py).
_BACKEND_PROBE = "Unable to initialize backend"


def quiet_library_logs() -> None:
    """Drops orbax's routine records from the absl log: its INFO records (several per save
    or restore) and its notices that a checkpoint directory is opened read-only; and JAX's
    INFO line that a backend it probes for is absent ("Unable to initialize backend 'tpu'"
    on every machine without a TPU, which reads like an error). Other warnings and errors,
    orbax's and JAX's included, still print. Call it once in a launcher's main (importing
    this module changes no logging)."""
    from absl import logging as absl_logging

    handler = absl_logging.get_absl_handler()
    if not any(f is _keep_record for f in handler.filters):
        handler.addFilter(_keep_record)


def _keep_record(record: logging.LogRecord) -> bool:
    """False (drop) for orbax's INFO records and its read-only notices, and JAX's INFO
    record of an absent backend; True otherwise."""
    path = record.pathname.replace("\\", "/")
    if path.endswith("/xla_bridge.py") and record.levelno < logging.WARNING:
        return not str(record.msg).startswith(_BACKEND_PROBE)
    if "/orbax/" not in path:
        return True
    if record.levelno < logging.WARNING:
        return False  # several INFO records per save and restore
    return record.levelno > logging.WARNING or not str(record.msg).startswith(_READ_ONLY_NOTICES)


# Renamed flags, old name -> new: the old one still works for one release, with a note.
# "split" names dataset splits only; cutting inputs at sentence ends is segmenting
# (data/segmenting.py).
RENAMED_FLAGS = {"split_len": "segment_len", "split_lens": "segment_lens"}


def rename_deprecated_flags(
    argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS
) -> list[str]:
    """`argv` with each old flag name (`RENAMED_FLAGS`) written as its new one, which the
    launcher defines, and a one-line note on stderr for each; nothing after a `--`."""
    out = list(argv[:1])
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "--":
            return out + list(argv[i:])
        dashes = "--" if arg.startswith("--") else "-" if arg.startswith("-") else ""
        name, eq, value = arg[len(dashes) :].partition("=")
        new = RENAMED_FLAGS.get(name)
        if dashes and new is not None and new in flag_values:
            print(f"note: --{name} is deprecated; use --{new} (the same setting).", file=sys.stderr)
            arg = f"{dashes}{new}{eq}{value}"
        out.append(arg)
    return out


def resolve_config_args(argv: Sequence[str], *, config_flag: str = "config") -> list[str]:
    """`argv` with every `--config=<name>[:arg]` of a shipped config replaced by its path."""
    prefix, out = f"--{config_flag}=", list(argv)
    for i, arg in enumerate(out):
        if arg.startswith(prefix):
            path, colon, rest = arg[len(prefix) :].partition(":")
            out[i] = f"{prefix}{resolve_config_path(path)}{colon}{rest}"
        elif arg == prefix[:-1] and i + 1 < len(out):  # absl's `--config configs/x.py`
            path, colon, rest = out[i + 1].partition(":")
            out[i + 1] = f"{resolve_config_path(path)}{colon}{rest}"
    return out


def check_config_args(argv: Sequence[str], *, config_flag: str = "config") -> None:
    """Raises ConfigError for a config spec that does not load or an override that cannot apply.

    Reads `--config=path[:arg]` and every `--config.a.b=value` of `argv`, as config_flags
    will; without a `--config=` flag there is nothing to check.
    """
    prefix, specs = f"--{config_flag}=", []
    for i, arg in enumerate(argv):
        if arg.startswith(prefix):
            specs.append(arg[len(prefix) :])
        elif arg == prefix[:-1] and i + 1 < len(argv):  # absl's `--config configs/x.py`
            specs.append(argv[i + 1])
    if not specs:
        return
    config = load_config_file(specs[-1])  # absl keeps the last value
    check_overrides(config, argv, config_flag=config_flag)


def check_overrides(
    config: ml_collections.ConfigDict, argv: Sequence[str], *, config_flag: str = "config"
) -> None:
    """Raises ConfigError for `--config.a.b=value` naming no key, or a value of the wrong type.

    Numbers and booleans are parsed by absl's own parsers, as config_flags parses them.
    """
    prefix = f"--{config_flag}."
    for arg in argv:
        if not arg.startswith(prefix):
            continue
        dotted, has_value, value = arg[len(prefix) :].partition("=")
        section, path = config, []
        for key in dotted.split("."):
            if not isinstance(section, ml_collections.ConfigDict) or key not in section:
                where = ".".join(path) or "the top level"
                valid = sorted(section) if isinstance(section, ml_collections.ConfigDict) else []
                raise ConfigError(
                    f"Unknown config key {dotted!r} (in {arg!r}): {where} has no key {key!r}"
                    f"{_did_you_mean(key, valid)}. Valid keys there: {', '.join(valid)}."
                )
            section, path = section[key], [*path, key]
        if has_value:
            _check_value(arg, dotted, value, current=section)


def print_config(config: ml_collections.ConfigDict) -> None:
    """Prints the resolved config (every key, overrides applied) to stdout."""
    print(config, end="")


def _check_value(arg: str, dotted: str, value: str, *, current: object) -> None:
    if isinstance(current, bool):
        parser, kind = flags.BooleanParser(), "True or False"
    elif isinstance(current, int):
        parser, kind = flags.IntegerParser(), "an integer"
    elif isinstance(current, float):
        parser, kind = flags.FloatParser(), "a number"
    else:
        return  # strings take anything; tuples and sections are parsed by config_flags
    try:
        parser.parse(value)
    except ValueError:
        raise ConfigError(
            f"{arg}: {dotted} takes {kind} (now {current!r}), got {value!r}."
        ) from None


def _did_you_mean(value: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _last_line(error: BaseException) -> str:
    # absl's and config_flags' messages can span lines (a nested traceback); the last
    # non-empty line names the problem.
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


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
    fv = {"flag_values": flag_values}
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
