"""Orbax checkpoints in the workdir and the workdir layout (training saves and restores the
whole state here; `workdir.params` reads the parameters alone, for inference and fine-tunes).

Workdir layout (everything a run needs to resume or translate):

    <workdir>/config.json          the resolved run config (ConfigDict JSON)
    <workdir>/tokenizer/source/    source tokenizer (`transformer_jax.data.save_tokenizers`)
    <workdir>/tokenizer/target/    target tokenizer
    <workdir>/tokenizer/truecaser.json  book-style runs: the targets' usual word forms, for
                                   natural-text translations (`data.truecasing`)
    <workdir>/checkpoints/<step>/  orbax: `state` (TrainState: step, params, opt_state, rng;
                                   host numpy), `data` (train iterator position, JSON),
                                   `meta` (vocabulary sizes and fingerprints, step,
                                   digests of the state's leaves, JSON)
    <workdir>/metrics.jsonl        one JSON object per logged/evaluated step
    <workdir>/tensorboard/         TensorBoard event files (tensorboardX)
    <workdir>/.lock                while a trainer runs: its PID and host (`workdir_lock`)
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from jax.experimental import multihost_utils

from transformer_jax.data import check_vocabulary, load_tokenizer, load_tokenizers
from transformer_jax.data.truecasing import TRUECASER_FILE, Truecaser
from transformer_jax.nn import ModelConfig
from transformer_jax.runtime.atomic_files import write_text_atomically
from transformer_jax.runtime.commands import shell_path, train_command
from transformer_jax.workdir.config_renames import upgrade_saved
from transformer_jax.workdir.lock import trainer_in
from transformer_jax.workdir.read_noise import quiet_failed_reads, quiet_vanished_steps
from transformer_jax.workdir.state_checks import (
    DIGEST_KEY,
    StateShapeError,
    check_restored,
    leaf_digests,
)

CONFIG_FILE = "config.json"
TOKENIZER_DIR = "tokenizer"
CHECKPOINT_DIR = "checkpoints"
CORRUPT_DIR = "checkpoints_corrupt"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


class NoCheckpointError(FileNotFoundError):
    """The workdir has no (readable) checkpoint."""


class RunFileError(ValueError):
    """A file a run needs (its tokenizers) is damaged; the message names it and the fix."""


class UnmovableCheckpointError(RuntimeError):
    """An unusable checkpoint that cannot be moved aside; the message says how to fix it."""


# --- config and tokenizers ----------------------------------------------------------------


def save_config(config: ml_collections.ConfigDict, workdir: str | Path) -> None:
    """Writes `<workdir>/config.json` atomically (a killed write leaves the old file whole)."""
    path = Path(workdir) / CONFIG_FILE
    text = json.dumps(config.to_dict(), indent=2, sort_keys=True, default=_json_default)
    write_text_atomically(path, text)


def load_config(workdir: str | Path) -> ml_collections.ConfigDict:
    """`<workdir>/config.json`, renamed keys and values under today's names (config_renames)."""
    path = Path(workdir) / CONFIG_FILE
    if not path.is_file():
        if training := _training_now(workdir):
            raise NoCheckpointError(training)
        if (Path(workdir) / CHECKPOINT_DIR).is_dir():  # a run that lost its config
            raise NoCheckpointError(
                f"{path} not found: {workdir} has checkpoints but no {CONFIG_FILE}, which "
                "says how to rebuild its model and data; put the file back (from a backup, "
                "or a run of the same config and overrides), then re-run."
            )
        raise NoCheckpointError(
            f"{path} not found: {workdir} is not a training workdir. Create one with: "
            + train_command(workdir)
        )
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(values, dict) or not {"model", "data"} <= values.keys():
            raise ValueError("valid JSON, but not a run config: it has no model and data keys")
        return ml_collections.ConfigDict(upgrade_saved(values))
    except (OSError, ValueError) as error:
        raise NoCheckpointError(
            f"{path} cannot be read ({type(error).__name__}: {error}); restore it from a copy, "
            "or train into a new workdir."
        ) from error


def load_workdir_tokenizers(directory: str | Path) -> tuple[Any, Any]:
    """`data.load_tokenizers` of a run's `tokenizer/`; `RunFileError` naming a damaged file.

    A checkpoint's embeddings fit only the exact vocabulary it was trained with, so the fix
    is the run's own files (a copy), never a retrained tokenizer.
    """
    try:
        return load_tokenizers(directory)
    except Exception as error:  # sentencepiece, json and the file system raise many types
        raise RunFileError(
            f"{_damaged_tokenizer_file(Path(directory))} cannot be loaded ({type(error).__name__}: "
            f"{one_line(error)}): copy the run's {TOKENIZER_DIR}/ back from a copy of the "
            "workdir; a retrained tokenizer would not fit its checkpoints."
        ) from error


def _damaged_tokenizer_file(directory: Path) -> Path:
    """The file of `directory/source|target` that does not load (the directory if unknown)."""
    for side in ("source", "target"):
        side_dir = directory / side
        try:
            load_tokenizer(side_dir)
        except Exception:
            meta = side_dir / "tokenizer.json"
            try:
                json.loads(meta.read_text(encoding="utf-8"))["kind"]
            except Exception:
                return meta
            others = sorted(p for p in side_dir.iterdir() if p.name != meta.name)
            return others[0] if len(others) == 1 else side_dir
    return directory


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def vocabulary_meta(src_tokenizer: Any, tgt_tokenizer: Any) -> dict[str, Any]:
    """What a checkpoint records about its vocabularies, to refuse a mismatched tokenizer."""
    return {
        "tokenizer": src_tokenizer.kind,
        "src_vocab_size": src_tokenizer.vocab_size,
        "tgt_vocab_size": tgt_tokenizer.vocab_size,
        "src_fingerprint": src_tokenizer.fingerprint,
        "tgt_fingerprint": tgt_tokenizer.fingerprint,
    }


def check_vocabulary_meta(meta: dict[str, Any], src_tokenizer: Any, tgt_tokenizer: Any) -> None:
    """Raises `VocabularyMismatchError` if the tokenizers are not the checkpoint's."""
    check_vocabulary(src_tokenizer, meta["src_fingerprint"], meta["src_vocab_size"], what="source")
    check_vocabulary(tgt_tokenizer, meta["tgt_fingerprint"], meta["tgt_vocab_size"], what="target")


# --- the checkpoint manager ---------------------------------------------------------------


def make_manager(
    workdir: str | Path, *, keep: int, read_only: bool = False
) -> ocp.CheckpointManager:
    """An orbax manager over `<workdir>/checkpoints`, keeping the last `keep` steps.

    A reader may open it while a trainer rotates its checkpoints: orbax lists the steps and
    then reads each one's commit time, so a step deleted in between raises
    FileNotFoundError (or NotADirectoryError); the listing is then simply done again. Where
    the step's metadata file vanished between orbax's look and its read, orbax logs an error
    and lists the step without its time: that error is dropped (`quiet_vanished_steps`).
    """
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        create=not read_only,
        read_only=read_only,
        cleanup_tmp_directories=not read_only,  # half-written saves of a killed run
    )
    for attempt in range(_LISTING_ATTEMPTS):
        try:
            with quiet_vanished_steps():
                manager = ocp.CheckpointManager(
                    Path(workdir).absolute() / CHECKPOINT_DIR,
                    options=options,
                    item_names=("state", "data", "meta"),
                )
            break
        except _VANISHED:
            if attempt == _LISTING_ATTEMPTS - 1:
                raise
    # orbax removes the temporary directories in a thread that only its first save waits
    # for; a start refused before that (a guarded resume) would exit while it runs and print
    # a 40-line "cannot schedule new futures after interpreter shutdown" traceback.
    wait_for_cleanup = getattr(manager, "_maybe_await_cleanup_tmp_directory", None)
    if wait_for_cleanup is not None:
        wait_for_cleanup()
    return manager


_LISTING_ATTEMPTS = 20  # a trainer deletes one step per save: a few tries always suffice
# What orbax raises for a step deleted while it lists: FileNotFoundError, or, when the step
# vanished between its `exists()` and `is_dir()` checks, NotADirectoryError (seen in CI).
_VANISHED = (FileNotFoundError, NotADirectoryError)


def list_steps(manager: ocp.CheckpointManager) -> list[int]:
    """The manager's steps as on disk now, ascending (re-listed; see `make_manager`).

    A trainer renames each new step into place, then deletes the oldest. A directory read
    while an entry is renamed may miss it (POSIX leaves it unspecified), and a step being
    deleted is no longer a finalized one, so a listing beside a trainer keeping one
    checkpoint has come back empty (seen: orbax "Found 0 checkpoint steps" between two
    listings of one step each). An empty listing of a directory that holds step-named
    entries is therefore done again, a few times, before it is believed.
    """
    for attempt in range(_LISTING_ATTEMPTS):
        last = attempt == _LISTING_ATTEMPTS - 1
        try:
            with quiet_vanished_steps():
                manager.reload()
                steps = sorted(manager.all_steps())
        except _VANISHED:
            if last:
                raise
            continue
        if steps or last or not _holds_step_entries(Path(manager.directory)):
            return steps
        time.sleep(_RELIST_PAUSE_S)
    raise AssertionError("unreachable")


_RELIST_PAUSE_S = 0.01  # a rename and a deletion take microseconds to milliseconds


def _holds_step_entries(directory: Path) -> bool:
    """Whether `directory` has an entry named like a step ("12", or a save in progress,
    "12.orbax-checkpoint-tmp-..."): an empty listing of it may have raced a trainer."""
    try:
        return any(entry.name[:1].isdigit() for entry in directory.iterdir())
    except OSError:  # gone or unreadable: the listing's answer stands
        return False


def save_checkpoint(
    manager: ocp.CheckpointManager, state: Any, data_state: dict, meta: dict
) -> None:
    """Saves a host (numpy) TrainState with the data position; written asynchronously.

    The meta records the step and a digest of every leaf, which `restore_latest` checks.

    Every process calls this (orbax synchronises them); numpy leaves are written by process 0.
    """
    step = int(state.step)
    meta = {**meta, "step": step, DIGEST_KEY: leaf_digests(state)}  # checked on restore
    manager.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(data_state),
            meta=ocp.args.JsonSave(meta),
        ),
        force=True,
    )


def abstract_tree(tree: Any) -> Any:
    """ShapeDtypeStructs (no memory) for a pytree of arrays or of ShapeDtypeStructs."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)


def _restore(manager: ocp.CheckpointManager, step: int, abstract_state: Any):
    restored = manager.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state),
            data=ocp.args.JsonRestore(),
            meta=ocp.args.JsonRestore(),
        ),
    )
    return restored.state, restored.data, restored.meta


def restore_latest(
    manager: ocp.CheckpointManager,
    abstract_state: Any,
    *,
    quarantine: bool = True,
    check: Callable[[Any, dict, dict, int], None] | None = None,
) -> tuple[Any, dict, dict] | None:
    """(state, data_state, meta) of the newest usable checkpoint, or None if there is none.

    Each restored state is verified (`state_checks.check_restored`: tree and shapes equal to
    `abstract_state`, params and optimizer moments finite, step consistent), then by `check`
    if given (called as `check(state, data_state, meta, step)`; it raises
    `CorruptCheckpointError` to reject one). A checkpoint that cannot be read or fails a check
    is reported in one line and the previous one used; with `quarantine` it is moved to
    `<workdir>/checkpoints_corrupt/` so that the resumed run can save that step again. A state
    of other shapes than `abstract_state` raises `StateShapeError` (the config changed; the
    checkpoint is fine and stays). orbax's per-array echo of a failed read is silenced
    (`read_noise`).
    """
    steps = sorted(manager.all_steps(), reverse=True)
    failed = False
    with quiet_failed_reads() as quiet:
        try:
            for step in steps:
                directory = Path(manager.directory) / str(step)
                try:
                    state, data_state, meta = _restore(manager, step, abstract_state)
                    check_restored(state, abstract_state, meta, step=step)
                    if check is not None:
                        check(state, data_state, meta, step)
                    return state, data_state, meta
                except StateShapeError:
                    raise
                except Exception as error:  # orbax raises many types for a damaged directory
                    reason = f"{type(error).__name__}: {one_line(error)}"
                failed = True
                moved = _quarantine(manager, directory, reason) if quarantine else None
                logging.error(
                    "Checkpoint %s is corrupt or unusable (%s); %s; trying the previous one.",
                    directory,
                    reason,
                    f"moved to {moved}" if moved else "left in place",
                )
        finally:
            if failed:  # late echoes of the reads orbax abandoned (slower on a busy machine)
                quiet.drain(quiet_for=0.5, limit=5.0)
    return None


def one_line(error: BaseException, limit: int = 300) -> str:
    """An error's message on one line, at most `limit` characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quarantine(manager: ocp.CheckpointManager, directory: Path, reason: str) -> Path:
    """Moves a bad step directory to `<workdir>/checkpoints_corrupt/<step>-<time>`.

    Raises `UnmovableCheckpointError` if it cannot be moved (a directory without write
    permission cannot change parents): resuming from an older one would then fail to save
    this step again, so the run stops here, saying what to fix.
    """
    target = directory.parent.parent / CORRUPT_DIR / f"{directory.name}-{int(time.time())}"
    if jax.process_index() == 0 and directory.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(directory, target)  # one file system (the workdir): atomic, no copy
        except OSError as error:
            raise UnmovableCheckpointError(
                f"Checkpoint {directory} is unusable ({reason}) and cannot be moved aside "
                f"({error.strerror}): fix its permissions (chmod -R u+rwX {directory}) or move "
                f"it out of {directory.parent}, then re-run the same command."
            ) from error
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"quarantine {directory}")
    list_steps(manager)
    return target


def save_truecaser(truecaser: Any, tokenizer_dir: Path, from_dir: Path | None = None) -> None:
    """Writes a run's truecaser beside its tokenizers: `truecaser` if given, else a copy of
    the one in `from_dir` (the tokenizers' origin, e.g. a fine-tune's `--init_from` run)."""
    if truecaser is not None:
        truecaser.save(tokenizer_dir / TRUECASER_FILE)
    elif from_dir is not None and (from_dir / TRUECASER_FILE).is_file():
        shutil.copyfile(from_dir / TRUECASER_FILE, tokenizer_dir / TRUECASER_FILE)


def load_truecaser(workdir: str | Path) -> Any:
    """The `Truecaser` saved with a run's tokenizers, None if it has none (data kept as
    written, or a run from before tables were saved: `Translator.text_truecaser`)."""
    path = Path(workdir) / TOKENIZER_DIR / TRUECASER_FILE
    return Truecaser.load(path) if path.is_file() else None


def model_config_from(
    config: ml_collections.ConfigDict, src_vocab_size: int, tgt_vocab_size: int
) -> ModelConfig:
    """The training-mode ModelConfig of a run config, with vocabulary sizes from the tokenizers."""
    return ModelConfig.from_dict(
        config.model.to_dict(), src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size
    )


def load_run(workdir: str | Path) -> tuple[ml_collections.ConfigDict, Any, Any, Any]:
    """(config, source tokenizer, target tokenizer, training-mode ModelConfig) of a workdir
    that has checkpoints; `NoCheckpointError` (saying how to train one) otherwise."""
    workdir = Path(workdir)
    config = load_config(workdir)
    checkpoint_dir = workdir.absolute() / CHECKPOINT_DIR
    if not checkpoint_dir.is_dir():
        raise NoCheckpointError(_no_checkpoint_message(checkpoint_dir, workdir))
    src_tokenizer, tgt_tokenizer = load_workdir_tokenizers(workdir / TOKENIZER_DIR)
    model_config = model_config_from(config, src_tokenizer.vocab_size, tgt_tokenizer.vocab_size)
    return config, src_tokenizer, tgt_tokenizer, model_config


def _training_now(workdir: str | Path) -> str | None:
    """The message for a workdir with nothing to read yet because a trainer is starting in
    it (`lock.trainer_in`), else None: re-running its command would only meet the lock."""
    holder = trainer_in(workdir)
    if holder is None:
        return None
    return (
        f"{workdir} is being trained ({holder}) and has no checkpoint yet: wait for its "
        "first save (config.checkpoint_every_steps), then run this again."
    )


def _no_checkpoint_message(checkpoint_dir: Path, workdir: Path) -> str:
    if training := _training_now(workdir):
        return training
    # The run's own config (any file, variant and overrides) is in its config.json: the
    # command that made it trains one; a shipped config's command would train another model.
    return (
        f"No readable checkpoint in {checkpoint_dir}. Train one by re-running the command "
        f"that made {shell_path(workdir)} (its config: {shell_path(Path(workdir) / CONFIG_FILE)})."
    )
