"""A training run whose device ran out of memory: which stage, what is saved, what fits.

`train_and_evaluate` runs its stages inside `MemoryWatch.watching()`; XLA's out-of-memory
error anywhere in them (`runtime.device_memory`) becomes one `DeviceMemoryError` line, written
once the run has stopped and its last save is complete, so it can say which checkpoint is
intact. Its fixes are the ones that stage can use, with the values to type:

- the train step: `grad_accum_steps` (the same batch in micro-batches: the same update, a
  fraction of the activations; the next value that divides every batch's rows a device),
  `model.remat` (activations recomputed in the backward pass), `steps_per_call=1` (one batch
  a device call): a resumed run accepts all three (`workdir/resume.py`);
- the validation pass: `eval.loss_batch_size` (rows of a loss batch at the full widths,
  default `data.batch_size`; the same loss at any size); its evaluators (the launcher's
  validation BLEU) decode as `eval.*` says (batch, beam, pairs): all resumable;
- building or restoring the state: the parameters and Adam's two moments.

A smaller batch or model is refused by a resumed run (its data stream and checkpoints would
no longer be one run): before the first checkpoint any change is accepted, after it a new
workdir (or `--init_from` this one) takes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path

import jax
import ml_collections

from transformer_jax.data.config import eval_rows, train_batch_rows
from transformer_jax.runtime import device_memory
from transformer_jax.workdir.checkpoints import CHECKPOINT_DIR
from transformer_jax.workdir.directory import newest_checkpoint


@dataclasses.dataclass
class MemoryWatch:
    """The stage a run is in, for the line an out-of-memory error gets (module docstring)."""

    config: ml_collections.ConfigDict
    workdir: Path
    stage: str = "init"  # "init" | "train" | "eval" (the loss) | "evaluators" (e.g. BLEU)
    step: int = 0  # the last step dispatched (train) or evaluated (eval)
    unchecked: int = 1  # the first step whose train call is not known to have run

    def at(self, stage: str, step: int) -> None:
        self.stage, self.step = stage, step

    def checked(self, step: int) -> None:
        """The train calls up to `step` ran (their metrics were fetched)."""
        self.unchecked = step + 1

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        with device_memory.out_of_memory(self._doing, self._fixes):
            yield

    def _doing(self) -> str:
        if self.stage == "train":
            if self.unchecked >= self.step:
                return f"in the train step at step {self.step:,}"
            # JAX dispatches steps ahead; an error shows when their metrics are fetched.
            return f"in the train step at one of steps {self.unchecked:,} to {self.step:,}"
        if self.stage == "eval":
            return f"in the validation pass at step {self.step:,}"
        if self.stage == "evaluators":
            return f"in the evaluators (validation BLEU) at step {self.step:,}"
        return "building the model's state (parameters and optimizer moments)"

    def _fixes(self) -> str:
        saved = newest_checkpoint(self.workdir / CHECKPOINT_DIR)
        if saved is None:
            return "Nothing was saved yet, so any setting may change: " + self._ways(new=True)
        return f"Nothing is lost: the checkpoint of step {saved:,} is intact. " + self._ways(
            new=False
        )

    def _ways(self, *, new: bool) -> str:
        """The stage's fixes, the flags to type first; `new`: no checkpoint holds the config."""
        config, data = self.config, self.config.data
        elsewhere = "" if new else " needs a new --workdir (or --init_from this one)"
        if self.stage == "eval":
            shards = jax.process_count() * jax.local_device_count()
            rows = eval_rows(data, shards, config.eval.loss_batch_size)
            now = f"{rows} validation rows of {data.max_src_len} + {data.max_tgt_len} tokens"
            if rows <= shards:  # one row a device: only the model or the widths are left
                return (
                    f"Its batches are {now}, one a device: a smaller model or shorter "
                    f"data.max_src_len / max_tgt_len{elsewhere or ' fits'}."
                )
            smaller = max(shards, rows // 2 // shards * shards)
            return (
                f"{'re-run' if new else 'Re-run the same command'} with "
                f"--config.eval.loss_batch_size={smaller} (now {now} a batch; the same loss "
                "at any size)" + ("." if new else ": a resumed run accepts it.")
            )
        if self.stage == "evaluators":  # they decode as the eval section says
            e = config.eval
            return (
                f"{'re-run' if new else 'Re-run the same command'} with a smaller "
                f"--config.eval.decode_batch_size (now {e.decode_batch_size} sentences a "
                f"batch) or --config.eval.beam_size (now {e.beam_size}), or "
                f"--config.eval.num_bleu_examples=0 (no validation BLEU)"
                + ("." if new else ": a resumed run accepts them.")
            )
        if self.stage == "init":
            return (
                "the parameters and Adam's two moments (three copies of the model) must fit; "
                f"a smaller model (model.model_dim, model.ffn_dim, the layers, data.vocab_size)"
                f"{elsewhere or ' fits'}."
            )
        ways = []
        accum = next_grad_accum(config, jax.process_count() * jax.local_device_count())
        if accum:
            ways.append(
                f"--config.grad_accum_steps={accum} (each batch in {accum} micro-batches: the "
                "same update, a fraction of the activations)"
            )
        if not config.model.remat:
            ways.append("--config.model.remat=True (activations recomputed in the backward pass)")
        if config.steps_per_call > 1:
            ways.append("--config.steps_per_call=1 (one batch a device call)")
        batch = (
            f"data.batch_tokens={data.batch_tokens}"
            if data.batch_tokens
            else f"data.batch_size={data.batch_size}"
        )
        smaller = f"a smaller batch ({batch}) or model"
        if new:
            return f"re-run with {', '.join(ways + [smaller])}."
        if not ways:
            return f"{smaller[0].upper()}{smaller[1:]}{elsewhere}."
        return (
            f"Re-run the same command with {' or '.join(ways)}: a resumed run accepts "
            f"{'it' if len(ways) == 1 else 'them'}; {smaller}{elsewhere}."
        )


def next_grad_accum(config: ml_collections.ConfigDict, shards: int) -> int | None:
    """The smallest `grad_accum_steps` above the config's that divides the rows each device
    gets of every training batch (what `validate_config` asks), or None."""
    rows = math.gcd(*(n // shards for n in train_batch_rows(config.data, shards).values()))
    current = config.grad_accum_steps
    return next((a for a in range(current + 1, rows + 1) if rows % a == 0), None)
