"""The training keys of a run config, their defaults, validation, and duration conversion.

A run config (see `configs/fra_eng.py`) has one source of defaults per concern, each one hop
from `configs/`:

- training keys: `training_defaults()` (here);
- `model`: the fields of `transformer_jax.nn.ModelConfig` (`ModelConfig.defaults_dict()`),
  of which `nn/variants.py` names the sizes of each variant;
- `data`: `transformer_jax.data.data_config()`.

`validate_config` checks the whole of it once, before anything is built or compiled (unknown
or missing keys, types, values, the dataset name and split strings), and raises one
`ConfigError` naming the bad value and the choices. `train_and_evaluate` calls it first
thing; a launcher turns the error into one `FATAL:` line (`transformer_jax.launch`).
Durations are written as `*_steps` or `*_epochs` and converted here only
(`resolve_num_train_steps`).
"""

from __future__ import annotations

import math

import ml_collections

from transformer_jax import runtime
from transformer_jax.data.config import (
    check_data_devices,
    check_data_values,
    data_config,
    train_batch_rows,
)
from transformer_jax.decoding.defaults import DEFAULTS as DECODING
from transformer_jax.nn import ModelConfig
from transformer_jax.ops.matmul import GRADIENTS
from transformer_jax.training import precompile
from transformer_jax.training.optimizer import OPTIMIZERS, SCHEDULES
from transformer_jax.training.parallel import PARALLELISMS
from transformer_jax.workdir.config_renames import upgrade_config


class ConfigError(ValueError):
    """A run config mistake; the message is one line naming the bad value and the choices."""


def training_defaults() -> ml_collections.ConfigDict:
    """Every training key with its default (the paper's optimizer, Vaswani et al. §5.3–5.4)."""
    c = ml_collections.ConfigDict()
    c.seed = 0  # parameter init and dropout
    c.parallelism = "pmap"  # "pmap" | "shard_map": how the step is mapped over devices
    # Optimizer: Adam β1 0.9, β2 0.98, ε 1e-9 (the paper); d2l uses the optax defaults.
    c.optimizer = "adam"  # "adam" | "adamw"
    c.adam_b1 = 0.9
    c.adam_b2 = 0.98
    c.adam_eps = 1e-9
    c.weight_decay = 0.0  # adamw only
    # "paper": learning_rate · D^-0.5 · min(n^-0.5, n · warmup^-1.5); "constant": learning_rate;
    # "linear" / "cosine": warm-up to the peak learning_rate, then decay to 0 at the last step.
    c.schedule = "paper"
    c.learning_rate = 1.0
    c.warmup_steps = 4000
    c.clip_norm = 0.0  # global-norm clipping threshold; 0 = off (d2l clips at 1)
    c.label_smoothing = 0.1  # ε_ls; 0 = plain masked cross-entropy (d2l)
    c.grad_accum_steps = 1  # micro-batches per update; must divide the per-device batch
    # Derivative rule of the train step's matmuls and loss (ops/matmul.py): "custom_vjp"
    # (hand-written backward rules: gradient matmuls in XLA:CPU's fast layouts, one-pass loss
    # backward) or "autodiff" (JAX's own); "auto" = "custom_vjp" on CPU, "autodiff" on GPU/TPU
    # (runtime/backend.py). The step is reverse mode only, where both work; the model
    # outside the step defaults to "autodiff" (ModelConfig.gradients).
    c.gradients = "auto"
    # Optimizer steps per device call (a lax.scan over a stack of batches): small models are
    # bound by the per-call dispatch, not by FLOPs. Logging/eval/checkpoint steps still land
    # exactly where configured (a call is cut short at those boundaries).
    c.steps_per_call = 1
    # "background": compile the eval step and the evaluators' and closing report's decoding
    # programs in a thread once the train step is compiled, while the run trains (an
    # accelerator's first run spends most of its time compiling); "off": each when first
    # used; "auto" = "background" on GPU/TPU, "off" on CPU (runtime/backend.py).
    c.precompile = "auto"
    # Duration: exactly one of these is > 0 (epochs are converted with the iterator's length).
    c.num_train_steps = 0
    c.num_epochs = 0
    c.log_every_steps = 50  # fetch metrics from the devices, check for NaN, print progress
    c.eval_every_steps = 500  # 0 = only at the end
    c.checkpoint_every_steps = 500  # 0 = only at the end
    c.keep_checkpoints = 3
    # Process tuning, applied by `transformer_jax.runtime.configure_process` before JAX
    # starts its backend (each knob and its default per backend: the runtime package).
    # Space-separated XLA flags; the d2l config uses one that speeds up its tiny step.
    c.xla_flags = ""
    # "reuse" keeps freed host blocks mapped, so XLA:CPU's per-step temporaries cost no
    # page faults; "system" hands them back to the OS; "auto" = "reuse" on CPU only.
    c.host_memory = "auto"
    # JAX's CPU lowering of Threefry: "auto" = "unrolled" (dropout masks fuse with the
    # hash; the same bits), or "rolled" (JAX's own loop; faster compiles).
    c.threefry_lowering = "auto"
    c.eval = eval_defaults()
    return c


def run_defaults() -> ml_collections.ConfigDict:
    """Every key of a run config at its default: the training keys with `eval`, `data`
    (`data_config`) and `model` (`ModelConfig.defaults_dict()`). A workdir's config.json saved
    before a key existed ran as its default (`workdir.resume.config_changes`)."""
    c = training_defaults()
    c.data = data_config()
    c.model = ml_collections.ConfigDict(ModelConfig.defaults_dict())
    return c


def eval_defaults() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    # Validation batches for loss/accuracy (of loss_batch_size rows); 0 = the whole eval split.
    c.num_batches = 0
    # Rows of a loss batch (validation, and the test report's loss); 0 = data.batch_size.
    # Forward only, any size gives the same loss: lower it if the validation pass runs out
    # of device memory (a resumed run accepts it, as every eval.* key).
    c.loss_batch_size = 0
    c.num_bleu_examples = 200  # validation pairs translated for BLEU (evenly spaced); 0 = none
    # Decoding: beam size, the length penalty α, the output budget max_len_a · W + max_len_b
    # (max_decode_len > 0 fixes it instead), segment_len for inputs of several sentences, the
    # batch. What each means and its default: the table in decoding/defaults.py.
    c.beam_size = DECODING["beam_size"]
    c.alpha = DECODING["alpha"]
    c.max_len_a = DECODING["max_len_a"]
    c.max_len_b = DECODING["max_len_b"]
    c.max_decode_len = DECODING["max_decode_len"] or 0  # 0 = none: the budget a·W + b
    c.segment_len = DECODING["segment_len"]
    c.decode_batch_size = DECODING["batch_size"]
    c.num_examples_to_show = 3  # translations printed with each BLEU evaluation
    # After training, the launcher scores n test pairs evenly spaced over the split (always
    # the same pairs, with the split's length mix): BLEU, chrF and BLEU by source length.
    # 0 = the whole test split; -1 = no test report.
    c.num_test_examples = 1000
    return c


_POSITIVE_INTS = (
    "warmup_steps",
    "grad_accum_steps",
    "steps_per_call",
    "log_every_steps",
    "keep_checkpoints",
)
_NON_NEGATIVE_INTS = (
    "num_train_steps",
    "num_epochs",
    "eval_every_steps",
    "checkpoint_every_steps",
)
_EVAL_INTS = (
    "num_batches",
    "loss_batch_size",
    "num_bleu_examples",
    "max_decode_len",
    "max_len_b",
    "num_examples_to_show",
)


def validate_config(
    config: ml_collections.ConfigDict, *, num_devices: int = 1, process_count: int = 1
) -> None:
    """Raises `ConfigError` naming the bad key/value and the valid choices.

    The one validation of a run config: keys, types, values of the training, model and data
    sections, the dataset name and split strings. Builds, reads and compiles nothing.
    A deprecated value (`workdir.config_renames`) is replaced by its new name first, with a note.
    """
    upgrade_config(config)
    try:
        fingerprint = repr(config.to_dict())
        if fingerprint not in _VALID:  # a call with the same config checks its devices only
            _validate(config)
            _VALID[fingerprint] = None
            while len(_VALID) > 16:  # forget the oldest: a sweep checks many configs
                del _VALID[next(iter(_VALID))]
        _check_devices(config, num_devices=num_devices, process_count=process_count)
    except ConfigError:
        raise
    except ValueError as error:  # the sections' own checks (ModelConfig, data, runtime)
        raise ConfigError(" ".join(str(error).split())) from error


# Configs (by content) that passed `_validate` in this process: the launcher validates before
# anything is built, and `train_and_evaluate` (which direct callers use) validates again;
# the second call then checks only the devices, which the launcher could not know yet.
_VALID: dict[str, None] = {}


def _validate(config: ml_collections.ConfigDict) -> None:
    """Every check of the config alone: keys, types, values, dataset name and splits."""
    defaults = training_defaults()
    _check_keys("", config, set(defaults) | {"model", "data"})
    _check_keys("eval.", config.eval, set(defaults.eval))
    if not isinstance(config.model, ml_collections.ConfigDict):
        raise ConfigError(
            f"model={config.model!r} must be a section (transformer_jax/nn/variants.py)."
        )
    # Types first, so that every later comparison is between numbers (or strings).
    _check_types("", config, defaults)
    _check_types("eval.", config.eval, defaults.eval)
    _check_types("model.", config.model, ModelConfig.defaults_dict())
    _check_types("data.", config.data, data_config())
    _check_choice("parallelism", config.parallelism, PARALLELISMS)
    _check_choice("optimizer", config.optimizer, OPTIMIZERS)
    _check_choice("schedule", config.schedule, SCHEDULES)
    _check_choice("gradients", config.gradients, ("auto", *GRADIENTS))
    _check_choice("precompile", config.precompile, precompile.CHOICES)
    for key in _POSITIVE_INTS:
        _check_int(key, config[key], minimum=1)
    for key in _NON_NEGATIVE_INTS:
        _check_int(key, config[key], minimum=0)
    for key in _EVAL_INTS:
        _check_int(f"eval.{key}", config.eval[key], minimum=0)
    for key in ("beam_size", "decode_batch_size"):
        _check_int(f"eval.{key}", config.eval[key], minimum=1)
    _check_int("eval.num_test_examples", config.eval.num_test_examples, minimum=-1)
    _check_int("eval.segment_len", config.eval.segment_len, minimum=0)
    for key in ("max_len_a", "alpha"):
        value = config.eval[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"eval.{key} must be a number >= 0, got {value!r}.")
    if config.eval.max_len_a == 0 and config.eval.max_len_b < 1:
        raise ValueError(
            "eval.max_len_a = 0 and eval.max_len_b < 1 leave no room for a translation; "
            f"e.g. the defaults max_len_a={DECODING['max_len_a']}, "
            f"max_len_b={DECODING['max_len_b']}."
        )
    if (config.num_train_steps > 0) == (config.num_epochs > 0):
        raise ValueError(
            f"Set exactly one of num_train_steps ({config.num_train_steps}) and num_epochs "
            f"({config.num_epochs}) to a positive value; set the other to 0."
        )
    runtime.check(config.xla_flags, config.host_memory, config.threefry_lowering)
    if not 0 < config.learning_rate < math.inf:  # inf passed `> 0`, then trained to NaN
        raise ValueError(
            f"learning_rate={config.learning_rate!r} must be a finite number > 0, e.g. 1.0."
        )
    if not 0.0 <= config.label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={config.label_smoothing!r} is outside [0, 1).")
    if config.clip_norm < 0:
        raise ValueError(f"clip_norm={config.clip_norm!r} must be >= 0 (0 = no clipping).")
    if not (0 <= config.adam_b1 < 1 and 0 <= config.adam_b2 < 1 and config.adam_eps > 0):
        raise ValueError(
            f"adam_b1={config.adam_b1}, adam_b2={config.adam_b2} must be in [0, 1) and "
            f"adam_eps={config.adam_eps} > 0."
        )
    if config.weight_decay < 0 or (config.weight_decay > 0 and config.optimizer != "adamw"):
        raise ValueError(
            f"weight_decay={config.weight_decay!r} needs optimizer='adamw' and a value >= 0."
        )

    check_data_values(config.data)
    model = ModelConfig.from_dict(config.model.to_dict(), src_vocab_size=1, tgt_vocab_size=1)
    longest = max(config.data.max_src_len, config.data.max_tgt_len)
    if model.position_limit is not None and model.position_limit < longest:
        raise ValueError(
            f"model.max_len={model.max_len} (learned positions) is shorter than the longest "
            f"training sequence (data.max_src_len / max_tgt_len = {longest}); raise "
            "model.max_len or lower the data limits."
        )


def _check_devices(
    config: ml_collections.ConfigDict, *, num_devices: int, process_count: int
) -> None:
    """The checks of the config against the devices: whole batches per device."""
    check_data_devices(config.data, num_devices=num_devices, process_count=process_count)
    # Each device's rows are cut into grad_accum_steps micro-batches (training/step.py), in
    # every batch shape: data.batch_size rows, or with data.batch_tokens those of each width.
    shards = process_count * num_devices
    per_device = {
        what: rows // shards for what, rows in train_batch_rows(config.data, shards).items()
    }
    if any(rows % config.grad_accum_steps for rows in per_device.values()):
        common = math.gcd(*per_device.values())
        rows = ", ".join(f"{what}: {n}" for what, n in per_device.items())
        raise ValueError(
            f"grad_accum_steps={config.grad_accum_steps} must divide the rows each device gets "
            f"of every training batch ({process_count} process(es) · {num_devices} device(s); "
            f"{rows}); choose one of {[d for d in range(1, common + 1) if common % d == 0]}"
            + ("; data.packing=True makes one row count." if common == 1 < len(per_device) else ".")
        )


def resolve_num_train_steps(config: ml_collections.ConfigDict, steps_per_epoch: int) -> int:
    """The one place where epochs become steps: num_epochs · (batches per epoch)."""
    if config.num_train_steps > 0:
        return int(config.num_train_steps)
    return int(config.num_epochs) * int(steps_per_epoch)


def _check_keys(prefix: str, section: ml_collections.ConfigDict, valid: set[str]) -> None:
    unknown = sorted(set(section) - valid)
    missing = sorted(valid - set(section))
    if unknown or missing:
        raise ValueError(
            f"config keys: unknown {[prefix + k for k in unknown]}, missing "
            f"{[prefix + k for k in missing]}. Valid keys: {sorted(prefix + k for k in valid)}."
        )


def _check_types(prefix: str, section, defaults) -> None:
    """Each value has its default's type (an int is a float too); sections are checked apart."""
    for key in sorted(set(section) & set(defaults)):
        value, default = section[key], defaults[key]
        if isinstance(default, ml_collections.ConfigDict) or default is None:
            continue
        expected = _type_name(default)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int | float):
            ok = isinstance(value, type(default) | int) and not isinstance(value, bool)
        elif isinstance(default, tuple | list):
            ok = isinstance(value, tuple | list)
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise ConfigError(
                f"{prefix}{key}={value!r} must be {expected} (the default is {default!r})."
            )


def _type_name(default) -> str:
    if isinstance(default, bool):
        return "True or False"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, tuple | list):
        return "a tuple"
    return "a string" if isinstance(default, str) else f"a {type(default).__name__}"


def _check_choice(key: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{key}={value!r} is not valid; choose one of {list(choices)}.")


def _check_int(key: str, value, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{key} must be an integer >= {minimum}, got {value!r}.")
