r"""Time to BLEU: test-split sacreBLEU / chrF of a fra-eng run at wall-clock checkpoints.

    python -m benchmarks.time_to_bleu --checkpoints_min=5,10,20
    python -m benchmarks.time_to_bleu --config=configs/fra_eng.py:variant=small \
        --config.model.dtype=bfloat16 --config.num_train_steps=100000 --checkpoints_min=10,30 \
        --beam_size=4 --out=runs/ttb.json
    python -m benchmarks.time_to_bleu --config=configs/fra_eng.py:runlocal \
        --checkpoints_min=0.5,1 --num_test=50                     # a smoke test, ~2 minutes

Config keys are overridden as for `experiments.train`, `--config.KEY=VALUE` (the older
`--set KEY=VALUE` still works, deprecated). Training is the project's own loop
(`training.train_and_evaluate`) in a fresh workdir; its `after_step` hook reads the clock
after every step. The clock starts before the run, so data preparation, tokenizer training
and compilation count (`--config.data.data_dir=<empty dir>` makes them cold: the dataset
is built from the zip and SentencePiece trained again). When a
checkpoint is due, the hook fetches the parameters (waiting for the step), stops the clock,
translates the test split (all of it by default, or `--num_test` evenly spaced pairs;
greedy, and beam `--beam_size` if > 1) and restarts the clock: evaluation is never charged
to training. The loop's own periodic validation is turned off for the same reason (it runs
once, after the last checkpoint).
Prints a markdown table; `--out` writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections

from benchmarks import common
from transformer_jax import launch
from transformer_jax.data import datasets, load_split_pairs, load_tokenizers, spread_subset
from transformer_jax.decoding.defaults import DEFAULTS
from transformer_jax.evaluation.bleu import format_length_table
from transformer_jax.evaluation.report import evaluate_translator
from transformer_jax.inference import Translator
from transformer_jax.runtime import configure_process
from transformer_jax.training.config import ConfigError
from transformer_jax.training.config_files import load_config_file, resolve_config
from transformer_jax.training.state import model_config_from
from transformer_jax.training.train import StepEnd, train_and_evaluate
from transformer_jax.workdir.checkpoints import CHECKPOINT_DIR, TOKENIZER_DIR

DEFAULT_CONFIG = "configs/fra_eng.py"


# ---------------------------------------------------------------------------- run config


def load_config(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """`configs/x.py[:arg]` with `--config.KEY=VALUE` overrides, resolved as `experiments.train`
    resolves them (`training.config_files.resolve_config`: values take the key's type). A key
    the config lacks or a value of the wrong type is a ConfigError naming it."""
    launch.check_overrides(load_config_file(spec), overrides)
    return resolve_config(spec, overrides)


def set_override(item: str) -> str:
    """The deprecated `--set KEY=VALUE` in the one override syntax: `--config.KEY=VALUE`."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: write key=value, e.g. --config.model.dtype=bfloat16.")
    return f"--config.{key}={value}"


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=DEFAULT_CONFIG,
        help="run config, path[:variant]; override its keys with --config.KEY=VALUE, as for "
        "experiments.train",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="deprecated: --config.KEY=VALUE",
    )


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> tuple[argparse.Namespace, list[str]]:
    """`parser`'s arguments and the config overrides: the deprecated `--set KEY=VALUE` ones
    rewritten as `--config.KEY=VALUE` (a note on stderr), then each `--config.KEY=VALUE`
    (or `--noconfig.KEY`) as given."""
    args, rest = parser.parse_known_args(argv)
    overrides = [a for a in rest if re.match(r"--(no)?config\.", a)]
    if len(overrides) < len(rest):
        parser.error(f"unrecognized arguments: {' '.join(a for a in rest if a not in overrides)}")
    try:
        sets = [set_override(item) for item in args.set]
    except ConfigError as error:
        parser.error(str(error))
    if sets:
        print(f"note: --set is deprecated; this is {' '.join(sets)}", file=sys.stderr)
    return args, [*sets, *overrides]


# ---------------------------------------------------------------------------- the clock


class Clock:
    """Seconds since creation, minus the time spent inside `paused()`."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._paused = 0.0

    def seconds(self) -> float:
        return time.perf_counter() - self._start - self._paused

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._paused += time.perf_counter() - start


# ---------------------------------------------------------------------------- evaluation


class TestScorer:
    """Translates the test pairs with given parameters: BLEU, chrF and BLEU by source length."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: Path, args: argparse.Namespace):
        # The loop saved its tokenizers before the first step; the dataset is built by then too.
        src_tok, tgt_tok = load_tokenizers(workdir / TOKENIZER_DIR)
        model_config = model_config_from(config, src_tok.vocab_size, tgt_tok.vocab_size)
        self.translator = Translator.from_params(
            model_config, None, src_tok, tgt_tok, config=config
        )
        test = load_split_pairs(config.data, config.data.test_split)
        self.pairs = spread_subset(test, args.num_test)
        self.beams = [1] + ([args.beam_size] if args.beam_size > 1 else [])
        self.alpha = args.alpha
        self.length_rows: dict[int, list[dict[str, Any]]] = {}  # per beam, of the last call

    def __call__(self, params: Any) -> dict[str, float]:
        translator = dataclasses.replace(self.translator, params=params)
        scores = {}
        for beam in self.beams:
            report = evaluate_translator(
                translator,
                self.pairs,
                num_samples=0,
                with_loss=False,
                with_speed=False,
                beam_size=beam,
                alpha=self.alpha,
            )
            scores[f"bleu_beam{beam}"] = report["bleu"]
            scores[f"bleu_ci95_beam{beam}"] = report["bleu_ci95"]
            scores[f"chrf_beam{beam}"] = report["chrf"]
            for row in report["bleu_by_length"]:
                scores[f"bleu_beam{beam}_{row['words']}"] = row["bleu"]
            self.length_rows[beam] = report["bleu_by_length"]
        return scores


# ---------------------------------------------------------------------------- the hook


class CheckpointHook:
    """`after_step` hook: counts tokens, evaluates when a wall-clock checkpoint is due."""

    def __init__(self, config, workdir: Path, args: argparse.Namespace, clock: Clock):
        self.config, self.workdir, self.args, self.clock = config, workdir, args, clock
        self.due = sorted(float(m) for m in args.checkpoints_min.split(","))
        self.tokens = 0  # non-pad source + target tokens trained on
        self.rows: list[dict[str, Any]] = []
        self.scorer: TestScorer | None = None

    def __call__(self, end: StepEnd) -> bool:
        self.tokens += sum(common.non_pad_tokens(b) for b in end.batches)  # host numpy: no sync
        ended = end.step == end.total_steps
        if not ended and self.clock.seconds() < 60 * self.due[0]:
            return False
        params = end.params()  # waits for the step, so the clock includes it
        seconds = self.clock.seconds()
        with self.clock.paused():
            start = time.perf_counter()
            if self.scorer is None:
                self.scorer = TestScorer(self.config, self.workdir, self.args)
            scores = self.scorer(params)
            eval_s = time.perf_counter() - start
        reached = [m for m in self.due if 60 * m <= seconds]
        self.due = [m for m in self.due if 60 * m > seconds]
        row = {
            "checkpoint_min": reached[-1] if reached else None,
            "minutes": seconds / 60,
            "steps": end.step,
            "train_tokens": self.tokens,
            **scores,
            "eval_seconds": eval_s,
            "note": f"run ended: num_train_steps={end.total_steps}" if ended and self.due else "",
        }
        self.rows.append(row)
        print(_row_line(row, self.scorer.beams), flush=True)
        return not self.due


# ---------------------------------------------------------------------------- output


def _model_line(m: ml_collections.ConfigDict) -> str:
    return (
        f"{m.num_encoder_layers}+{m.num_decoder_layers} layers, D {m.model_dim}, H {m.num_heads}, "
        f"F {m.ffn_dim}, {m.dtype}"
    )


def _header(beams: list[int]) -> str:
    cols = ["checkpoint min", "minutes", "steps", "train tokens (src+tgt)"]
    for beam in beams:
        search = "greedy" if beam == 1 else f"beam {beam}"
        cols += [f"test BLEU {search}", f"chrF {search}", f"BLEU 16+ words {search}"]
    cols += ["eval s (paused)", "note"]
    return "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)


def _row_line(row: dict[str, Any], beams: list[int]) -> str:
    target = "-" if row["checkpoint_min"] is None else f"{row['checkpoint_min']:g}"
    cells = [target, f"{row['minutes']:.2f}", f"{row['steps']:,}", f"{row['train_tokens']:,}"]
    for beam in beams:
        long = row.get(f"bleu_beam{beam}_16+")
        cells += [f"{row[f'bleu_beam{beam}']:.2f}", f"{row[f'chrf_beam{beam}']:.2f}"]
        cells.append("-" if long is None else f"{long:.2f}")
    cells += [f"{row['eval_seconds']:.1f}", row["note"]]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_config_args(parser)
    parser.add_argument("--checkpoints_min", default="5,10,20", help="wall-clock minutes")
    parser.add_argument(
        "--num_test", type=int, default=0, help="n evenly spaced test pairs; 0 = all (8,491)"
    )
    parser.add_argument("--beam_size", type=int, default=1, help="> 1: also beam search")
    parser.add_argument(
        "--alpha", type=float, default=DEFAULTS["alpha"], help="beam length penalty"
    )
    parser.add_argument("--workdir", default="", help="empty or new dir (default: a temp dir)")
    parser.add_argument("--out", default="", help="write the rows as JSON here")
    args, overrides = parse_args(parser)

    clock = Clock()  # the run starts now: everything below counts, except evaluation
    try:
        config = load_config(args.config, overrides)
    except ValueError as error:  # ConfigError: a missing file, key or variant
        parser.error(str(error))
    configure_process(config)  # before the first computation: XLA flags, host memory
    config.eval_every_steps = 0  # the loop's validation would be charged to training time
    config.eval.num_bleu_examples = 0  # ... and it runs once more after the last checkpoint
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="time_to_bleu_"))
    if (workdir / CHECKPOINT_DIR).exists():
        raise SystemExit(f"{workdir} has checkpoints: a resumed run is not timed from scratch.")
    prepared = config.data.name != "fra_eng" or datasets.fra_eng_builder(config.data).is_prepared()
    hook = CheckpointHook(config, workdir, args, clock)
    print(
        f"config {args.config} {' '.join(overrides)} | model {_model_line(config.model)} | "
        f"devices {jax.devices()} | test: {args.num_test or 'all'} pairs of "
        f"{config.data.test_split!r} (evenly spaced), sacreBLEU on detokenised text | "
        f"workdir {workdir}\n"
        "Wall clock counts from the start of the run: data preparation (dataset already "
        f"built: {'yes' if prepared else 'no'}, data_dir {config.data.data_dir}), tokenizer "
        "training (SentencePiece models are cached in data_dir), compilation and checkpoint "
        "saves are included; evaluation pauses it.",
        flush=True,
    )
    print(_header([1] + ([args.beam_size] if args.beam_size > 1 else [])), flush=True)
    try:
        train_and_evaluate(config, workdir, after_step=hook)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    if hook.due:
        print(f"not reached: {hook.due} min (the run ended first)")
    if hook.scorer is not None and hook.rows:
        last = hook.rows[-1]
        for beam, rows in hook.scorer.length_rows.items():
            total = {
                "count": sum(r["count"] for r in rows),
                "bleu": last[f"bleu_beam{beam}"],
                "bleu_ci95": last[f"bleu_ci95_beam{beam}"],
                "chrf": last[f"chrf_beam{beam}"],
            }
            print(f"\nBLEU by source length at {last['minutes']:.1f} min, beam {beam}:")
            print("\n".join(format_length_table(rows, total)))
    if args.out:
        Path(args.out).write_text(json.dumps(hook.rows, indent=2), encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
