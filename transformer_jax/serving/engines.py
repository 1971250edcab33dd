"""The models a server decodes with: one object with `options`, `translate` and `warm_up`.

    engine = JaxEngine(Translator.from_workdir("runs/fra_eng"))     # or CTranslate2Engine(dir)
    options = engine.options({"beam_size": 4, "nbest": 2})         # DecodeOptions, validated
    engine.translate(["go .", "i lost ."], options)
    # -> [[{"text": "Va !", "score": -0.4, "log_prob": -0.5}, {...}], [...]]
    engine.warm_up(max_sentences=64)                # compile what a batch of <= 64 will use

`translate(lines, options, line_ids=None)` takes raw text, as `experiments.translate` does:
prepared as the run's data (`Translator.prepare`; a prefix too) and returned as text to read
(`text="natural"`) or as the model wrote it (`"data"`): per line its hypotheses, best first
(`options.nbest` of them), each `{"text", "score", "log_prob"}` (`decoding.options.Hypotheses`;
`{"text"}` alone for plain search, which takes `decode_ids`' faster path without scores).
`options(given)` puts a request's options over the engine's defaults (the server's decoding
flags, else the run's). Both engines take every option (n-best, sampling, prefix).

Sampling: `line_ids` (each line's index within its own request, from the batcher) key a
line's draws in the JAX engine (`per_line_samples`), so a request merged with others samples
as it would alone. CTranslate2 draws from one generator per worker thread, seeded per call:
its samples depend on the whole call, so the server decodes such requests in calls of their
own (`per_line_samples = False`).

Warm-up: each padded batch shape is one XLA program, compiled on first use (seconds on a
CPU, `decoding.batch_decode`), so a server compiles before it answers `/health` with 200:
every row count a merged batch of up to `max_sentences` lines pads to (`row_counts`: 1, 2,
4, 8, then multiples of 8 up to the decode batch size) at every program width of sources
up to the run's training length (16 and 64 for fra_eng), for the default options. Requests
with other options compile their own programs on first use. The programs compile
`warm_up_threads` at a time (`decoding.compile_only.compiling`; default
`compile_only.default_threads()`: one per host core up to 8, but 1 under the CPU default
`host_memory="reuse"`), then each batch is decoded once for real, which compiles nothing more
and shows that every program runs. A program compiled after the warm-up (an option or
shape it did not cover) is logged as a warning and counted in `describe()`'s
`compiled_while_serving`, which `/health` reports: each was a latency spike of seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformer_jax.decoding import compile_only
from transformer_jax.decoding.options import DecodeOptions, Hypotheses
from transformer_jax.decoding.shapes import FIRST_WIDTH, WIDTH_FACTOR
from transformer_jax.evaluation.translate_cli import check_format, format_lines
from transformer_jax.export.ct2_translate import (
    load_truecaser,
    open_translator,
    read_manifest,
    translate_detailed,
)
from transformer_jax.inference import Translator, encode_sources
from transformer_jax.runtime import backend, compile_log
from transformer_jax.serving.batch_shapes import like_budgets, row_counts
from transformer_jax.serving.requests import decode_options

Hypothesis = dict[str, Any]  # {"text": str, "score": float, "log_prob": float}
_PLAIN = DecodeOptions()  # the option values that ask for nothing beyond beam_size and alpha
logger = logging.getLogger("transformer_jax.serving")


class JaxEngine:
    """A `Translator` (JAX) behind the server: its settings are the defaults of a request."""

    name = "jax"
    per_line_samples = True  # a line's samples depend on its seed, line_id and text only

    def __init__(
        self,
        translator: Translator,
        *,
        text: str = "natural",
        warm_up_beam_sizes: Sequence[int] = (),
        warm_up_threads: int | None = None,
        group_budgets: bool | None = None,
        **defaults: Any,
    ):
        """`defaults`: decoding settings that replace the run's (None: the run's), e.g. the
        server's --beam_size; `DecodeOptions` fields and `Translator` settings alike.
        `warm_up_beam_sizes`: beam sizes whose programs `warm_up` compiles besides the
        default options' (e.g. 1 for greedy requests on a beam-4 server).
        `warm_up_threads`: programs `warm_up` compiles at once (None:
        `compile_only.default_threads()`; 1: one after another, as each batch is decoded).
        `group_budgets`: decode a merged batch in groups of like output budgets
        (`like_budgets`); None: on a CPU, where a batch's every row costs compute (a GPU
        or TPU runs the rows of a small batch side by side: there one call is cheaper)."""
        check_format("plain", text)
        if any(not isinstance(b, int) or b < 1 for b in warm_up_beam_sizes):
            raise ValueError(
                f"warm-up beam sizes must be whole numbers >= 1: {warm_up_beam_sizes}."
            )
        if warm_up_threads is None:
            warm_up_threads = compile_only.default_threads()
        if not isinstance(warm_up_threads, int) or warm_up_threads < 1:
            raise ValueError(
                f"warm-up threads must be a whole number >= 1, got {warm_up_threads!r}."
            )
        self.warm_up_threads = warm_up_threads
        given = {k: v for k, v in defaults.items() if v is not None}
        names = DecodeOptions.field_names()
        settings = {**translator.settings, **{k: v for k, v in given.items() if k not in names}}
        self.translator = dataclasses.replace(translator, settings=settings)
        self.text = text
        if group_budgets is None:
            group_budgets = backend.expected_platform() == "cpu"
        self.group_budgets = group_budgets
        self.default_options = decode_options(settings, {k: given[k] for k in given if k in names})
        self.compiled_while_serving = {"programs": 0, "seconds": 0.0}  # after the warm-up
        self._warming = False
        self.warm_up_options = [self.default_options] + [
            dataclasses.replace(
                self.default_options, beam_size=b, nbest=min(b, self.default_options.nbest)
            )
            for b in dict.fromkeys(warm_up_beam_sizes)
            if b != self.default_options.beam_size
        ]

    def options(self, given: dict[str, Any]) -> DecodeOptions:
        """A request's options over this engine's defaults; RequestError(400) if invalid."""
        return decode_options(dataclasses.asdict(self.default_options), given)

    def describe(self) -> dict[str, Any]:
        """What `/health` reports: the engine, the checkpoint step, the default options, and
        the programs compiled since the warm-up (`compiled_while_serving`)."""
        options = dataclasses.asdict(self.default_options)
        compiled = dict(self.compiled_while_serving)
        compiled["seconds"] = round(compiled["seconds"], 2)
        return {
            "engine": self.name,
            "step": self.translator.step,
            "defaults": options,
            "compiled_while_serving": compiled,
        }

    def translate(
        self,
        lines: Sequence[str],
        options: DecodeOptions,
        line_ids: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        translator = self.translator
        prepared = [translator.prepare(line) for line in lines]
        natural = translator.natural if self.text == "natural" else None
        # beam_size and alpha alone take the fast path (`decode_ids`, the best hypothesis, no
        # scores), as translate does.
        chosen = {"beam_size": options.beam_size, "alpha": options.alpha, **_beyond(options)}
        if "prefix" in chosen:  # prepared as the lines are (translate's --prefix too)
            chosen["prefix"] = _map_prefix(
                options.prefix, lambda text: translator.prepare(text, target=True)
            )
        ids = list(range(len(lines)) if line_ids is None else line_ids)
        results: list[list[Hypothesis]] = [[] for _ in lines]
        groups = [list(range(len(lines)))]
        if self.group_budgets:
            groups = like_budgets(translator, prepared, max(options.beam_size, options.nbest))
        with compile_log.recording() as compiled:
            self._decode_groups(groups, lines, prepared, ids, chosen, natural, results)
        if compiled.programs and not self._warming:
            self.compiled_while_serving["programs"] += len(compiled.programs)
            self.compiled_while_serving["seconds"] += compiled.seconds
            logger.warning(
                "a batch of %d lines (beam_size=%d) compiled %d programs in %.1f s while "
                "serving: the warm-up did not cover them (options other than the defaults: "
                "--warm_up_beam_sizes).",
                len(lines),
                options.beam_size,
                len(compiled.programs),
                compiled.seconds,
            )
        return results

    def _decode_groups(
        self,
        groups: list[list[int]],
        lines: Sequence[str],
        prepared: list[str],
        ids: list[int],
        chosen: dict[str, Any],
        natural: Any,
        results: list[list[Hypothesis]],
    ) -> None:
        """`translate`'s calls, one per group, each line's result put in `results`."""
        translator = self.translator
        for group in groups:
            settings = dict(chosen)
            if isinstance(chosen.get("prefix"), tuple):  # one per line: this group's
                settings["prefix"] = tuple(chosen["prefix"][i] for i in group)
            out = translator.translate_detailed(
                [prepared[i] for i in group],
                warn=False,
                sample_ids=[ids[i] for i in group],  # a line's draws: its own, in any group
                **settings,
            )
            done = _results([lines[i] for i in group], out.texts, out.hypotheses, natural)
            for i, result in zip(group, done, strict=True):
                results[i] = result

    def warm_up(self, max_sentences: int, stop: threading.Event | None = None) -> int:
        """Compiles the programs of batches of up to `max_sentences` lines with the default
        options and the `warm_up_beam_sizes`, `warm_up_threads` at a time, then decodes each
        batch once (module docstring); returns the number of batches decoded. `stop`, once
        set (the server is shutting down), ends it after the batch at hand: a process that
        exits while a thread compiles aborts in XLA's teardown."""
        batch_size = self.translator.settings["batch_size"]
        counts = row_counts(min(max_sentences, batch_size))
        sentences = self._warm_up_sentences()  # the same for every option set, widths rising
        # The most rows and the widest sources first: the longest compiles start first.
        batches = [
            functools.partial(self.translate, [sentence] * count, options)
            for count in reversed(counts)
            for sentence in reversed(sentences)
            for options in self.warm_up_options
        ]
        stopped = stop.is_set if stop is not None else lambda: False
        self._warming = True
        try:
            return self._warm_up(batches, stopped)
        finally:
            self._warming = False

    def _warm_up(self, batches: list[functools.partial], stopped: Any) -> int:
        """`warm_up`'s two passes: compile (in worker threads, if several), then decode."""
        if self.warm_up_threads > 1 and len(batches) > 1:
            with compile_only.compiling(threads=self.warm_up_threads):
                for batch in batches:  # each returns once its programs are handed over
                    if stopped():
                        break
                    batch()
        decoded = 0
        for batch in batches:  # for real: each program runs (compiled above, or now)
            if stopped():
                break
            batch()
            decoded += 1
        return decoded

    def _warm_up_sentences(self) -> list[str]:
        """One sentence per program width up to the trained length: the first alphabetic
        word of the source vocabulary repeated (so no sentence end cuts it)."""
        translator = self.translator
        tokenizer = translator.src_tokenizer
        word = next(
            (
                w
                for w in (tokenizer.decode([i]).strip() for i in range(tokenizer.vocab_size))
                if w.isalpha()
            ),
            None,
        )
        if word is None:
            return []
        limit = translator.model_config.position_limit
        longest = translator.settings.get("trained_len") or FIRST_WIDTH
        sentences, below, width = [], 0, FIRST_WIDTH
        while True:
            width = min(width, limit) if limit else width
            sentence = " ".join([word] * max(1, below))  # below + 1 tokens or more, with <eos>
            ids = encode_sources(tokenizer, [translator.prepare(sentence)], warn=False).ids[0]
            if below < len(ids) <= width:
                sentences.append(sentence)
            if width >= longest or (limit and width >= limit):
                return sentences
            below, width = width, width * WIDTH_FACTOR


class CTranslate2Engine:
    """A CTranslate2 export (`experiments.export --format=ctranslate2`) behind the server:
    no JAX, no compilation. Defaults: the run's settings, from the export's `export.json`;
    every option as `export.ct2_translate` maps it (n-best, sampling, prefix)."""

    name = "ctranslate2"
    per_line_samples = False  # one generator per call (module docstring)

    def __init__(
        self, model_dir: str | Path, *, text: str = "natural", intra_threads: int = 0, **defaults
    ):
        check_format("plain", text)
        self.model_dir = Path(model_dir)
        manifest = read_manifest(model_dir)
        recorded = {k: v for k, v in manifest.get("decoding", {}).items() if v is not None}
        given = {k: v for k, v in defaults.items() if v is not None}
        self.default_options = decode_options({**recorded, **given}, {})
        # The other settings (max_len_a, segment_len, ...) for every call; the options'
        # values come with each request's `DecodeOptions`.
        names = DecodeOptions.field_names()
        self._settings = {k: v for k, v in given.items() if k not in names}
        # The [export] extra's library (a MissingExtraError names the install command), the
        # export's files against their digests (a DamagedExportError says to export again).
        self._translator = open_translator(model_dir, intra_threads=intra_threads)
        truecaser = load_truecaser(model_dir) if text == "natural" else None
        self._natural = truecaser.natural if truecaser is not None else None

    def options(self, given: dict[str, Any]) -> DecodeOptions:
        """A request's options over this engine's defaults; RequestError(400) if invalid."""
        return decode_options(dataclasses.asdict(self.default_options), given)

    def describe(self) -> dict[str, Any]:
        options = dataclasses.asdict(self.default_options)
        return {"engine": self.name, "model_dir": str(self.model_dir), "defaults": options}

    def translate(
        self,
        lines: Sequence[str],
        options: DecodeOptions,
        line_ids: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        del line_ids  # samples are drawn per call here (the server does not merge them)
        settings = {**self._settings, "beam_size": options.beam_size, "alpha": options.alpha}
        out = translate_detailed(
            self.model_dir, lines, translator=self._translator, **settings, **_beyond(options)
        )
        return _results(lines, out.texts, out.hypotheses, self._natural)

    def warm_up(self, max_sentences: int, stop: threading.Event | None = None) -> int:
        del max_sentences, stop  # nothing to compile: one call loads what the first one would
        self.translate(["go ."], self.default_options)
        return 1


def _beyond(options: DecodeOptions) -> dict[str, Any]:
    """The options other than beam_size and alpha that differ from plain search: with none,
    an engine takes its fast path (the best hypothesis, no scores)."""
    return {
        k: v
        for k, v in dataclasses.asdict(options).items()
        if k not in ("beam_size", "alpha") and v != getattr(_PLAIN, k)
    }


def _results(
    lines: Sequence[str],
    texts: Sequence[str],
    hypotheses: Sequence[Hypotheses] | None,
    natural: Any,
) -> list[list[Hypothesis]]:
    """Per line its hypotheses as the server answers them: `{"text"}` for the best text of
    plain search (`hypotheses` None), else `{"text", "score", "log_prob"}` each, best first;
    texts formatted as `translate --text` would (`natural`: the truecaser's, or None)."""
    if hypotheses is None:
        return [[{"text": t}] for t in format_lines(lines, texts, "plain", natural)]
    results: list[list[Hypothesis]] = [[] for _ in lines]
    for rank in range(max((len(h.texts) for h in hypotheses), default=0)):
        rows = [i for i, h in enumerate(hypotheses) if rank < len(h.texts)]
        ranked = [hypotheses[i].texts[rank] for i in rows]
        formatted = format_lines([lines[i] for i in rows], ranked, "plain", natural)
        for i, text in zip(rows, formatted, strict=True):
            h = hypotheses[i]
            hypothesis = {"text": text, "score": h.scores[rank], "log_prob": h.log_probs[rank]}
            results[i].append(hypothesis)
    return results


def _map_prefix(prefix: Any, prepare: Any) -> Any:
    """A prefix (text, or one per line: a tuple, None/"" = none) with `prepare` applied."""
    if isinstance(prefix, tuple):
        return tuple(prepare(p) if p else p for p in prefix)
    return prepare(prefix) if prefix else prefix
