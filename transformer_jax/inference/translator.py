"""The one inference path: a trained model with its tokenizers, text in, text out.

    translator = Translator.from_workdir("runs/fra_eng")            # params only, no optimizer
    translator.translate(["go .", "i lost ."], beam_size=4)         # -> ["va !", "j'ai perdu ."]
    translator.translate_options(["go ."], DecodeOptions(beam_size=4, nbest=2))  # n-best, scores
    Translator.from_workdirs(["runs/a", "runs/b@4000"])              # an ensemble
    translator = Translator.from_params(model_config, params, src_tok, tgt_tok, config=config)

The translate and evaluate commands, the train loop's BLEU, the notebook, fine-tuning and
checkpoint averaging all build one. Sources are data/'s `encode_text` rows (ids + `<eos>`,
as in training; `inference.source_ids`), decoded in sorted, padded batches over the local
devices (`decoding.decode_ids`) and detokenised in the input order. Inputs are expected as
the data stores them (fra_eng: the book's lowercasing and spaced punctuation); `prepare`
turns raw text into that.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from transformer_jax.data.segmenting import join_translations
from transformer_jax.data.text_form import book_style, detokenize_book, input_form
from transformer_jax.data.truecasing import Truecaser
from transformer_jax.data.typography import plain_forms
from transformer_jax.data.vocab import EOS_ID, PAD_ID
from transformer_jax.decoding.batch_decode import Hypothesis, decode_ids, decode_nbest
from transformer_jax.decoding.defaults import OPTION_DEFAULTS
from transformer_jax.decoding.options import DecodeOptions, Hypotheses
from transformer_jax.inference.attention_maps import AttentionMaps, attention_weights
from transformer_jax.inference.joined_nbest import joined_hypotheses
from transformer_jax.inference.notes import cut_note
from transformer_jax.inference.run_specs import split_checkpoint, split_workdirs
from transformer_jax.inference.settings import decode_settings
from transformer_jax.inference.source_ids import DecodingWarning, EncodedSources, encode_sources
from transformer_jax.nn import ModelConfig
from transformer_jax.workdir.params import load_params


@dataclasses.dataclass
class Translations:
    """What `Translator.translate_detailed` returns, in the input order.

    texts: the translations ("" for an empty input; the parts' translations joined with
    spaces for an input cut at sentence ends). tokens: generated ids per sentence ((0,) for
    an empty one), `<eos>` then `<pad>` (for a cut input: its target_ids then `<eos>`).
    target_ids: the ids of each translation without `<eos>` and padding (a cut input's parts
    in order). sources: the encoded inputs, with the indices of empty, longer-than-trained
    and cut ones. generated_tokens: tokens produced, each `<eos>` included. unfinished:
    {sentence index: tokens generated} for translations stopped by their output budget
    before `<eos>` (a part's, for an input cut at sentence ends; `inference.notes.cut_note`).
    """

    texts: list[str]
    tokens: list[np.ndarray]
    target_ids: list[list[int]]
    sources: EncodedSources
    generated_tokens: int
    # Each sentence's n-best with scores, when asked for (`Translator.translate_options`).
    hypotheses: list[Hypotheses] | None = None
    unfinished: dict[int, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Translator:
    """A model in decode form, its parameters (host numpy) and tokenizers, and the decoding
    settings its `translate` uses unless told otherwise (`decoding.defaults.DEFAULTS` keys).

    config, step and averaged_steps say where the parameters came from (None / () when
    built from parameters in memory). truecaser: the run's learned word forms for `natural`
    (`data.truecasing`; None: punctuation and sentence capitals only).
    """

    model_config: ModelConfig  # deterministic=True
    params: Any
    src_tokenizer: Any
    tgt_tokenizer: Any
    settings: dict[str, Any]
    config: ml_collections.ConfigDict | None = None
    step: int | None = None
    averaged_steps: tuple[int, ...] = ()
    truecaser: Any = None
    # An ensemble's other members, ((model_config, params), ...): each step decodes with the
    # mean of every member's log-probabilities (`decoding.model_decode`). () = this model alone.
    ensemble: tuple[tuple[ModelConfig, Any], ...] = ()
    # The weights placed on each device mesh decoding used (batch_decode's params_cache):
    # kept with this translator, so that repeated calls (a server's) do not copy them.
    _placed: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    # --- construction --------------------------------------------------------------------

    @classmethod
    def from_params(
        cls,
        model_config: ModelConfig,
        params: Any,
        src_tokenizer: Any,
        tgt_tokenizer: Any,
        *,
        config: ml_collections.ConfigDict | None = None,
        **settings: Any,
    ) -> Translator:
        """A translator over parameters in memory (e.g. the train loop's current ones).

        Decoding settings come from the run `config` if given (`decode_settings`), then from
        `settings` (beam_size, alpha, max_decode_len, max_len_a, max_len_b, batch_size,
        trained_len, segment_len).
        """
        return cls(
            model_config=model_config.replace(deterministic=True, decode=False),
            params=params,
            src_tokenizer=src_tokenizer,
            tgt_tokenizer=tgt_tokenizer,
            settings=decode_settings(config, **settings),
            config=config,
        )

    @classmethod
    def from_workdir(
        cls, workdir: str | Path, step: int | None = None, average_last: int = 1
    ) -> Translator:
        """The run in `workdir`: its config, tokenizers and the parameters of its newest usable
        checkpoint (or of `step`), restored alone (`workdir.params.load_params`).

        average_last > 1 averages the last N readable checkpoints ending at `step`; `step` is
        then the newest of them and `averaged_steps` lists them all (a workdir written by
        `averaging.write_averaged_checkpoint` reports the steps its checkpoint averages).
        Raises `NoCheckpointError` (saying how to train one) if there is nothing to restore.
        """
        run = load_params(workdir, step, average_last=average_last)
        translator = cls.from_params(
            run.model_config, run.params, run.src_tokenizer, run.tgt_tokenizer, config=run.config
        )
        return dataclasses.replace(
            translator, truecaser=run.truecaser, step=run.step, averaged_steps=run.averaged_steps
        )

    @classmethod
    def from_workdirs(cls, specs: Sequence[str], average_last: int = 1) -> Translator:
        """An ensemble of runs: each spec a workdir, or `workdir@STEP` for that checkpoint
        (`split_checkpoint`).

        The first run's config, tokenizers and decoding settings are the translator's; every
        run must have the same source and target vocabularies (a ValueError naming the one
        that differs). One spec is that run alone, as `from_workdir`.
        """
        if not specs:
            raise ValueError("an ensemble needs at least one workdir.")
        runs = [cls.from_workdir(*split_checkpoint(spec), average_last) for spec in specs]
        check_vocabularies(runs, [str(spec) for spec in specs])
        first = runs[0]
        members = tuple((run.model_config, run.params) for run in runs[1:])
        return dataclasses.replace(first, ensemble=members)

    @property
    def decode_model(self) -> tuple[Any, Any]:
        """(config, params) as decoding takes them: tuples for an ensemble."""
        if not self.ensemble:
            return self.model_config, self.params
        members = ((self.model_config, self.params), *self.ensemble)
        return tuple(m[0] for m in members), tuple(m[1] for m in members)

    # --- text ----------------------------------------------------------------------------

    @property
    def book_style(self) -> bool:
        """Whether the data's text is the book's (lowercased, punctuation spaced)."""
        return self.config is not None and book_style(self.config)

    def prepare(self, text: str, *, target: bool = False) -> str:
        """Raw source text (or with `target`, a target prefix) -> the form the data stores
        (`data.text_form.input_form`): control characters become spaces, a source's
        typography the tokenizer cannot read becomes plain (“yes” -> "yes"), then the
        book's preprocessing if the run's data had it. Prepared text is unchanged."""
        plain = None if target else self._plain_forms
        return input_form(text, book=self.book_style, plain=plain)

    @functools.cached_property
    def _plain_forms(self) -> dict[str, str]:
        """`data.typography.plain_forms` of the source tokenizer, worked out once."""
        return plain_forms(self.src_tokenizer)

    def detokenize(self, text: str) -> str:
        """A translation or reference as sacreBLEU should score it (the book's spaced
        punctuation joined back for book-style data; other text unchanged)."""
        return detokenize_book(text) if self.book_style else text

    @property
    def text_truecaser(self) -> Any:
        """The `Truecaser` that `natural` uses: the run's, or for a book-style run without
        one (from before tables were saved, or built from parameters) one without learned
        forms; None for data kept as written."""
        if not self.book_style:
            return None
        return self.truecaser or Truecaser(self.config.data.target_lang)

    def natural(self, translation: str, source: str = "") -> str:
        """A translation as text to read (`data.truecasing`): for book-style data, the
        punctuation joined as the target language sets it and capitals restored (sentence
        starts, the training targets' names, names capitalised in `source`, the input as
        written); other text unchanged. evaluate scores `detokenize`'s lowercase form."""
        truecaser = self.text_truecaser
        return truecaser.natural(translation, source) if truecaser else translation

    def token_names(self, ids: Sequence[int], *, target: bool = False) -> list[str]:
        """A name per id (the tokenizer's `id_to_token`, else the decoded id), for plots."""
        tokenizer = self.tgt_tokenizer if target else self.src_tokenizer
        name = getattr(tokenizer, "id_to_token", None)
        return [name(int(i)) if name else tokenizer.decode([int(i)]) for i in ids]

    # --- translating ---------------------------------------------------------------------

    def translate(self, sentences: Sequence[str], **settings: Any) -> list[str]:
        """Translate sentences (as the data stores them; see `prepare`) -> texts, in order.

        `settings` override the translator's: beam_size (1 = greedy; larger beams rank by
        log P / ((5 + len) / 6)^alpha), alpha, max_decode_len, max_len_a, max_len_b,
        batch_size, trained_len, segment_len. An input of several sentences longer than
        `segment_len` tokens (with `<eos>`) is translated in parts of whole sentences of at most
        that length, and their translations are joined (`data.segmenting`; segment_len 1, the
        default: sentence by sentence; 0: whole). A sentence is never cut: one longer than
        `trained_len` is translated whole with a `DecodingWarning`; with learned positions,
        one beyond the table is a `SourceTooLongError`. An empty sentence gets a
        warning and the translation "". Each sentence generates at most `max_decode_len`
        tokens if given, else `max_len_a · W + max_len_b`, W its own length rounded up to 8
        (whatever else its batch holds), and no more than a source 4 times `trained_len`
        would get (`decoding.shapes.output_cap`); a translation stopped there gets a
        `DecodingWarning`. The `DecodeOptions` fields are keywords too (temperature,
        top_k, top_p, seed: sampling; prefix: a forced start; nbest): the best text of each;
        `translate_options` returns the n-best with scores.
        """
        return self.translate_detailed(sentences, **settings).texts

    def translate_detailed(
        self,
        sentences: Sequence[str],
        *,
        warn: bool = True,
        progress: Callable[[int, int], None] | None = None,
        scores: bool = False,
        sample_ids: Sequence[int] | None = None,
        **settings: Any,
    ) -> Translations:
        """`translate`, also returning the ids, the encoded sources and the token count.

        warn=False leaves the reporting of empty and too-long inputs and of translations cut
        by their budget to the caller (`Translations.sources.empty` / `.long`,
        `Translations.unfinished`). `progress(done, total)`: called after each
        decoding batch with the rows (sentences, or their parts) decoded so far.
        `settings` may hold `DecodeOptions` fields (nbest, temperature, top_k, top_p, seed,
        prefix); with any of them, or `scores`, `Translations.hypotheses` holds each
        sentence's n-best with scores (`translate_options`), and the texts are the best.
        sample_ids: when sampling, each sentence's random identity (default: its index), so
        that its samples depend on the seed, this id and its text only; e.g. a server that
        merges requests passes each sentence's index within its own request.
        """
        options = {**self.settings, **{k: v for k, v in settings.items() if v is not None}}
        options = decode_settings(None, **options)  # rejects an unknown keyword
        chosen = {k: options.pop(k) for k in OPTION_DEFAULTS if k in options}
        search = DecodeOptions.from_mapping(
            {"beam_size": options["beam_size"], "alpha": options["alpha"], **chosen}
        )
        prefixes = search.prefixes(len(sentences))
        trained_len = options["trained_len"]
        encoded = encode_sources(
            self.src_tokenizer,
            sentences,
            trained_len=options.pop("trained_len"),
            position_limit=self.model_config.position_limit,
            segment_len=options.pop("segment_len"),
            warn=warn,
        )
        # One decoding row per source, or per part of a source cut at sentence ends.
        owners = [i for i in range(len(sentences)) for _ in encoded.rows(i)]
        parts = [p for i in range(len(sentences)) for p in range(len(encoded.rows(i)))]
        rows = [row for i in range(len(sentences)) for row in encoded.rows(i)]
        config, params = self.decode_model
        nbest: list[list[Hypothesis]] | None = None
        if scores or search != DecodeOptions(beam_size=search.beam_size, alpha=search.alpha):
            prefix_ids = [self.tgt_tokenizer.encode(p) if p else [] for p in prefixes]
            # A row's random identity: its sentence's id and which part of it (0: whole).
            ids = range(len(sentences)) if sample_ids is None else list(sample_ids)
            if len(ids) != len(sentences):
                raise ValueError(f"{len(ids)} sample_ids for {len(sentences)} sentences.")
            nbest = decode_nbest(
                config,
                params,
                rows,
                options=search,
                # A prefix starts its input: the first part of a cut one.
                prefixes=[
                    prefix_ids[i] if p == 0 else [] for i, p in zip(owners, parts, strict=True)
                ],
                max_decode_len=options["max_decode_len"],
                max_len_a=options["max_len_a"],
                max_len_b=options["max_len_b"],
                batch_size=options["batch_size"],
                progress=progress,
                sample_ids=[(ids[i], p) for i, p in zip(owners, parts, strict=True)],
                params_cache=self._placed,
                trained_len=trained_len,
            )
            decoded = [np.asarray(h[0].ids if h else [EOS_ID], np.int32) for h in nbest]
        else:
            decoded = decode_ids(
                config, params, rows, progress=progress, params_cache=self._placed,
                trained_len=trained_len, **options,
            )  # fmt: skip
        texts: list[list[str]] = [[] for _ in sentences]
        target_ids: list[list[int]] = [[] for _ in sentences]
        tokens: list[np.ndarray] = [np.zeros((0,), np.int32)] * len(sentences)
        generated = 0
        unfinished: dict[int, int] = {}
        for i, row in zip(owners, decoded, strict=True):
            ids = [int(t) for t in row]
            texts[i].append(self.tgt_tokenizer.decode(ids))
            part = ids[: ids.index(EOS_ID)] if EOS_ID in ids else _unpadded(ids)
            if EOS_ID not in ids and part:  # stopped by its budget, maybe mid-word
                unfinished[i] = max(unfinished.get(i, 0), len(part))
            target_ids[i] += part
            tokens[i] = row
            generated += len(part) + (EOS_ID in ids)
        for i in encoded.parts:  # a cut input's tokens: its parts' ids, then one <eos>
            tokens[i] = np.asarray([*target_ids[i], EOS_ID], np.int32)
        joined = [join_translations(parts) for parts in texts]
        hypotheses = None
        if nbest is not None:
            hypotheses = self._hypotheses(len(sentences), owners, nbest)
        if warn and unfinished:
            (first, n), count = next(iter(unfinished.items())), len(unfinished)
            more = f" (and {count - 1} more)" if count > 1 else ""
            warnings.warn(cut_note(first, n, numbered_from=0) + more, DecodingWarning, 2)
        return Translations(joined, tokens, target_ids, encoded, generated, hypotheses, unfinished)

    def translate_options(
        self,
        sentences: Sequence[str],
        options: DecodeOptions | Mapping[str, Any] | None = None,
        *,
        warn: bool = True,
        progress: Callable[[int, int], None] | None = None,
        sample_ids: Sequence[int] | None = None,
        **settings: Any,
    ) -> list[Hypotheses]:
        """Each sentence's n-best with log-probabilities and scores, in the input order.

        options: a `DecodeOptions` (used as given), or a mapping of its fields over this
          translator's beam_size and alpha (None: the translator's settings). `settings`: the
          other `translate` keywords (max_decode_len, segment_len, ...). An input cut at
          sentence ends is decoded part by part (a prefix starts its first part), and its
          n-best are the parts' best combinations (`inference.joined_nbest`: rank 1 joins
          each part's best, as `translate` does), with the parts' log-probabilities and
          scores summed. An empty sentence gets `Hypotheses(("",), (0.0,), (0.0,))`.
          sample_ids: as `translate_detailed`'s (default: each sentence's index).
        """
        if not isinstance(options, DecodeOptions):
            base = {"beam_size": self.settings["beam_size"], "alpha": self.settings["alpha"]}
            options = DecodeOptions.from_mapping({**base, **(options or {})})
        options.validate()
        fields = dataclasses.asdict(options)
        out = self.translate_detailed(
            sentences,
            warn=warn,
            progress=progress,
            scores=True,
            sample_ids=sample_ids,
            **settings,
            **fields,
        )
        return out.hypotheses

    def _hypotheses(
        self, count: int, owners: list[int], nbest: list[list[Hypothesis]]
    ) -> list[Hypotheses]:
        """Per sentence, its rows' n-best as text (a cut input: its parts' best combinations)."""
        rows: list[list[list[Hypothesis]]] = [[] for _ in range(count)]
        for i, hyps in zip(owners, nbest, strict=True):
            rows[i].append(hyps)
        out = []
        for parts in rows:
            if not parts:  # an empty input
                out.append(Hypotheses(("",), (0.0,), (0.0,)))
            elif len(parts) == 1:
                hyps = parts[0]
                texts = tuple(self.tgt_tokenizer.decode(h.ids) for h in hyps)
                log_probs = tuple(h.log_prob for h in hyps)
                out.append(Hypotheses(texts, log_probs, tuple(h.score for h in hyps)))
            else:  # the parts' best combinations
                decode = self.tgt_tokenizer.decode
                out.append(
                    joined_hypotheses(
                        [[(decode(h.ids), h.log_prob, h.score) for h in hyps] for hyps in parts]
                    )
                )
        return out

    def attention_maps(
        self, sentence: str, target_ids: Sequence[int] | None = None, **settings: Any
    ) -> AttentionMaps:
        """Attention weights of `sentence` and its translation, for heatmaps (d2l §11.7.6).

        target_ids: the translation's ids (without `<bos>`/`<eos>`); by default this
        translator's own translation (with `settings`). Returns an
        `inference.attention_maps.AttentionMaps` with the tokens named.
        """
        if target_ids is None:  # one map: the input is translated whole, never in parts
            settings = {**settings, "segment_len": 0}
            out = self.translate_detailed([sentence], warn=False, **settings)
            src, tgt = out.sources.ids[0], out.target_ids[0]
        else:
            position_limit = self.model_config.position_limit
            encoded = encode_sources(
                self.src_tokenizer, [sentence], position_limit=position_limit, warn=False
            )
            src, tgt = encoded.ids[0], list(target_ids)
        if not src:
            raise ValueError("attention_maps needs a non-empty sentence.")
        return attention_weights(
            self.model_config,
            self.params,
            src,
            tgt,
            src_tokens=self.token_names(src),
            tgt_tokens=["<bos>", *self.token_names(tgt, target=True)],
        )


def check_vocabularies(translators: Sequence[Translator], names: Sequence[str]) -> None:
    """A one-line ValueError unless every translator has the first one's source and target
    vocabularies (their tokenizers' fingerprints): an ensemble averages distributions over
    the same ids."""
    first = translators[0]
    for name, other in zip(names[1:], translators[1:], strict=True):
        for side, which in (("src_tokenizer", "source"), ("tgt_tokenizer", "target")):
            if getattr(other, side).fingerprint != getattr(first, side).fingerprint:
                raise ValueError(
                    f"{name} has another {which} vocabulary than {names[0]}: an ensemble's "
                    "models must share their vocabularies (train them with the same data "
                    "and tokenizer settings)."
                )


def load_translator(workdir: str | Path, step: int | None = None, average_last: int = 1):
    """The translator of `--workdir`: one run (`workdir` or `workdir@STEP`, else `step`), or
    an ensemble of comma-separated ones (`Translator.from_workdirs`; each its own @STEP), as
    `split_workdirs` reads them (a directory whose name has commas is one run)."""
    specs = split_workdirs(workdir)
    if len(specs) == 1:
        return Translator.from_workdir(*split_checkpoint(specs[0], step), average_last)
    if step is not None:
        raise ValueError(
            f"--step={step} with an ensemble of {len(specs)} workdirs: give each its "
            "checkpoint as workdir@STEP."
        )
    return Translator.from_workdirs(specs, average_last)


def _unpadded(ids: list[int]) -> list[int]:
    """A hypothesis that ran out of budget before `<eos>`: its ids without padding."""
    return [t for t in ids if t != PAD_ID]
