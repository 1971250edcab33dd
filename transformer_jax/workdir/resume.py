"""What a run may change when it resumes in an existing workdir.

A workdir is one run: its `config.json` says what its checkpoints, tokenizers and metrics
are. Before anything is written, `check_resume_config` compares the new config with it:

- **Refused** (`ConfigMismatchError`): every key that changes the model, the vocabulary or the
  data stream, so that the checkpoints no longer fit or the run would mix two experiments:
  `model.*` (but `model.remat`, which recomputes the same function), `data.*` (but where
  the corpus is found and how many validation pairs are scored), `seed` (it made the
  initial parameters and the dropout stream, which a resume restores from the checkpoint,
  so a new seed would be recorded without being true) and `optimizer` (its state has
  another tree). The two ways forward: a new workdir, or a fine-tune of this run's
  parameters in a new workdir with `--init_from` (`train_and_evaluate(init_from=...)`).
- **Accepted and recorded** (a log line each; `config.json` is rewritten once the run
  starts): the run length, the log/eval/checkpoint intervals, `keep_checkpoints`, `eval.*`,
  the process settings (`parallelism`, `steps_per_call`, `precompile`, `xla_flags`,
  `host_memory`, `threefry_lowering`) and the derivative rule `gradients` (the same math
  either way).
- **Accepted with a warning**: keys that change the optimisation of the remaining steps
  (learning rate, schedule and warm-up, clipping, label smoothing, Adam's constants,
  weight decay, gradient accumulation). A new `num_train_steps` / `num_epochs` under a
  `linear` or `cosine` schedule also moves the point where it decays to 0: warned too.

A key the saved config lacks was added to the code since; the run ran as its default (a key
is added with the default that keeps the old behaviour). Given the defaults (`defaults`:
the training launcher and the sweep runner pass them), the key at its default is no change,
and at another value it is classified as any change of that key. Without them, or for a key
the defaults lack, it is accepted with a note ("new key"), as is a key the code has dropped.

A workdir without a checkpoint has nothing to protect: its run stopped before its first save
(a kill at step 100 of a run that saves at 500). A refused key is then accepted as
"replaced": the run starts afresh with the new config, its tokenizers built again and the
old history moved aside, rather than sending the user to an `--init_from` that has no
parameters to give. So is one whose checkpoints were all moved aside as unusable, with
`--restart_from_scratch`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import ml_collections
from absl import logging

from transformer_jax.runtime.commands import shell_path
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir import history
from transformer_jax.workdir.directory import newest_checkpoint

FREE_KEYS = frozenset(
    {
        "num_train_steps",
        "num_epochs",
        "log_every_steps",
        "eval_every_steps",
        "checkpoint_every_steps",
        "keep_checkpoints",
        "steps_per_call",
        "precompile",
        "parallelism",
        "xla_flags",
        "host_memory",
        "threefry_lowering",
        "gradients",
        "model.remat",
        "data.data_dir",
        "data.zip_path",
        "data.url",
        "data.zip_sha256",
        "data.num_eval_examples",
    }
)
FREE_PREFIXES = ("eval.",)
OPTIMISATION_KEYS = frozenset(
    {
        "learning_rate",
        "schedule",
        "warmup_steps",
        "clip_norm",
        "label_smoothing",
        "adam_b1",
        "adam_b2",
        "adam_eps",
        "weight_decay",
        "grad_accum_steps",
    }
)
DECAYING_SCHEDULES = ("linear", "cosine")
INIT_FROM_FLAG = "--init_from"


class ConfigMismatchError(ValueError):
    """The config changes keys a resumed run cannot change; the message lists them."""


@dataclasses.dataclass(frozen=True)
class ConfigChange:
    key: str  # dotted, e.g. "model.ffn_dim"
    old: Any
    new: Any
    kind: str  # "refused" | "replaced" | "optimisation" | "accepted" | "new key"

    def __str__(self) -> str:
        return f"{self.key}: {self.old!r} -> {self.new!r}"


def classify(key: str) -> str:
    """ "accepted", "optimisation" or "refused" for a dotted config key (module docstring)."""
    if key in FREE_KEYS or key.startswith(FREE_PREFIXES):
        return "accepted"
    if key in OPTIMISATION_KEYS:
        return "optimisation"
    return "refused"


def config_changes(
    old: dict,
    new: ml_collections.ConfigDict | dict,
    defaults: ml_collections.ConfigDict | dict | None = None,
) -> list[ConfigChange]:
    """Every leaf that differs between a saved config (JSON dict) and `new`, classified.

    `defaults`: every key's default; a key `old` lacks is then compared at its default (the
    module docstring)."""
    new_json = _as_json(_as_dict(new))
    old_flat, new_flat = _flatten(_as_json(old)), _flatten(new_json)
    default_flat = _flatten(_as_json(_as_dict(defaults))) if defaults is not None else {}
    changes = []
    for key in sorted(set(old_flat) | set(new_flat)):
        before, after = old_flat.get(key, _MISSING), new_flat.get(key, _MISSING)
        if before == after:
            continue
        ran_as = default_flat.get(key, _MISSING) if before is _MISSING else before
        if ran_as == after:  # a key added since, at the default the saved run ran with
            continue
        if after is _MISSING or ran_as is _MISSING:
            kind = "new key"
        else:
            kind = classify(key)
        changes.append(ConfigChange(key, _show(before), _show(after), kind))
    schedule = new_json.get("schedule")
    for i, change in enumerate(changes):
        if change.key in ("num_train_steps", "num_epochs") and schedule in DECAYING_SCHEDULES:
            changes[i] = dataclasses.replace(change, kind="optimisation")
    return changes


def check_resume_config(
    config: ml_collections.ConfigDict,
    workdir: str | Path,
    *,
    restart_from_scratch: bool = False,
    defaults: ml_collections.ConfigDict | None = None,
) -> list[ConfigChange]:
    """The accepted changes of `config` against `<workdir>/config.json` ([] if there is none).
    `defaults`: every key's default, for the keys the saved config lacks (`config_changes`).

    Raises `ConfigMismatchError` naming every refused key and the ways forward that can work.
    Refused keys are accepted as "replaced" where no checkpoint would be mixed up: a workdir
    that never committed one (its run stopped before its first save), or, with
    `restart_from_scratch`, one whose checkpoints were all moved aside as unusable. Writes
    nothing: the caller saves the config once the run is under way (and rebuilds the
    tokenizers of a replaced config; its old history is moved aside by `restore`).
    """
    workdir = Path(workdir)
    if not (workdir / ckpt.CONFIG_FILE).is_file():
        return []
    old = ckpt.load_config(workdir).to_dict()
    changes = config_changes(old, config, defaults)
    refused = [c for c in changes if c.kind == "refused"]
    if not refused:
        return changes
    committed = _has_committed_step(workdir)
    if not history.ever_checkpointed(workdir) or (restart_from_scratch and not committed):
        return [dataclasses.replace(c, kind="replaced") if c in refused else c for c in changes]
    if committed:
        new_workdir = f"{str(workdir).rstrip('/')}_finetune"
        ways = (
            "Either train into a new --workdir, or fine-tune this run's parameters in a new "
            f"workdir: --workdir={shell_path(new_workdir)} {INIT_FROM_FLAG}={shell_path(workdir)}."
        )
    else:  # nothing to fine-tune from: its checkpoints were all unusable
        ways = (
            "Its checkpoints were all moved aside as unusable: train into a new --workdir, or "
            "re-run with --restart_from_scratch to move its history to previous_runs/ and "
            "start afresh with this config."
        )
    raise ConfigMismatchError(
        f"{workdir} holds a run with another model, vocabulary or data: "
        f"{'; '.join(str(c) for c in refused)} (vs {workdir / ckpt.CONFIG_FILE}). Resuming "
        f"would mix two runs, so nothing was written. {ways}"
    )


def _has_committed_step(workdir: Path) -> bool:
    """Whether `<workdir>/checkpoints/` holds a committed step (usable or not: unknown yet)."""
    return newest_checkpoint(workdir / ckpt.CHECKPOINT_DIR) is not None


def log_changes(changes: list[ConfigChange], workdir: str | Path) -> None:
    """One log line per accepted change; a warning for those that change the optimisation."""
    replaced = [c for c in changes if c.kind == "replaced"]
    if replaced:
        logging.warning(
            "%s has no checkpoint of its previous config, so the run starts afresh with this "
            "one: %s (recorded in config.json; the tokenizers are built again).",
            workdir,
            "; ".join(str(c) for c in replaced),
        )
    for change in changes:
        if change.kind == "replaced":
            continue
        if change.kind == "optimisation":
            logging.warning(
                "Resuming %s with %s: the remaining steps are optimised differently "
                "(recorded in config.json).",
                workdir,
                change,
            )
        else:
            note = " (not in the saved config)" if change.kind == "new key" else ""
            logging.info("Resuming %s with %s%s (recorded in config.json).", workdir, change, note)


_MISSING = object()


def _as_json(tree: dict) -> dict:
    """As config.json holds it (tuples become lists), so that equal values compare equal."""
    return json.loads(json.dumps(tree, default=ckpt._json_default))


def _as_dict(tree: ml_collections.ConfigDict | dict) -> dict:
    return tree.to_dict() if isinstance(tree, ml_collections.ConfigDict) else tree


def _show(value: Any) -> Any:
    return "<absent>" if value is _MISSING else value


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
