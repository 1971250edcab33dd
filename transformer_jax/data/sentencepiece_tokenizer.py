"""SentencePiece tokenizer (unigram or BPE), with the framework's special ids.

Subword vocabularies replace the book's word vocabulary for real runs: no `<unk>` for rare
words and a fixed, configurable vocabulary size.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from transformer_jax.data import subword_draws, vocab

_MODEL_FILE = "spm.model"
_META_FILE = "tokenizer.json"
# SentencePiece's trainer splits its EM over `num_threads`, and the model depends on the
# split: on the fra-eng train split, 1, 2, 3, 4 and 16 threads gave five different models
# (each the same on every repeat). A fixed count makes the vocabulary, and so a run, the
# same on every machine; 2 is what every run so far was trained and measured with (2-core
# machines), and takes 3.9 s where 1 thread takes 5.6 s.
TRAIN_THREADS = 2


class SentencePieceTokenizer:
    """Wraps a `sentencepiece.SentencePieceProcessor` trained with PAD/BOS/EOS/UNK = 0/1/2/3."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        self._model_proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._model_proto)
        self._pieces: subword_draws.PieceTable | None = None  # built by the first `encode_sampled`
        actual = tuple(self._sp.id_to_piece(i) for i in range(vocab.NUM_SPECIAL))
        if actual != vocab.SPECIAL_TOKENS:
            raise ValueError(
                f"SentencePiece model has special pieces {actual}, expected {vocab.SPECIAL_TOKENS}"
                "; train it with `SentencePieceTokenizer.train`."
            )

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model (what `save` writes as spm.model)."""
        return self._model_proto

    @classmethod
    def train(
        cls, sentences: Iterable[str], *, vocab_size: int, model_type: str = "unigram"
    ) -> SentencePieceTokenizer:
        """Trains on `sentences` (the training split only; never on eval/test text)."""
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                pad_id=vocab.PAD_ID,
                bos_id=vocab.BOS_ID,
                eos_id=vocab.EOS_ID,
                unk_id=vocab.UNK_ID,
                pad_piece=vocab.PAD,
                bos_piece=vocab.BOS,
                eos_piece=vocab.EOS,
                unk_piece=vocab.UNK,
                # Keep every character of the (small, Latin-script) corpus in the vocabulary.
                character_coverage=1.0,
                num_threads=TRAIN_THREADS,  # not the machine's cores: see TRAIN_THREADS
                minloglevel=2,
            )
        except RuntimeError as error:
            raise ValueError(
                f"SentencePiece training failed with data.vocab_size={vocab_size}, "
                f"data.sp_model_type={model_type!r}: {str(error).rstrip('.')}. For a small "
                "corpus lower data.vocab_size to the limit it names."
            ) from error
        return cls(model.getvalue())

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def fingerprint(self) -> str:
        """sha256 of the ordered pieces: equal iff every id means the same piece."""
        pieces = (self._sp.id_to_piece(i) for i in range(self.vocab_size))
        return hashlib.sha256("\n".join(pieces).encode()).hexdigest()[:16]

    def token_to_id(self, token: str) -> int:
        return self._sp.piece_to_id(token)

    def id_to_token(self, index: int) -> str:
        return self._sp.id_to_piece(index)

    def encode(self, text: str) -> list[int]:
        """Piece ids of `text`; no `<bos>`/`<eos>` added (batching adds them)."""
        return self._sp.encode(text)

    def encode_sampled(
        self, texts: Sequence[str], *, alpha: float, nbest: int, seed: int
    ) -> list[list[int]]:
        """One sampled segmentation of each text (subword regularization, Kudo 2018).

        Unigram: a segmentation drawn with probability ∝ P(x)^alpha, from all of them
        (`nbest` -1: forward filtering and backward sampling over SentencePiece's lattice) or
        from SentencePiece's `nbest` best (>= 2). BPE: BPE-dropout (Provilkov et al. 2020),
        each merge skipped with probability `alpha`; `nbest` is unused. SentencePiece's own
        rules (its lattice and scores, its n-best lists, its merge order), drawn with numpy's
        generator seeded by `seed`: the same (texts, alpha, nbest, seed) give the same ids in
        every process and on every host. SentencePiece's own sampling does not since 0.2.2
        (its generator is salted per process; data/subword_draws.py).
        """
        texts = list(texts)
        if not texts or 0 <= nbest <= 1:  # SentencePiece: one candidate is the best one
            return [self.encode(text) for text in texts]
        rng = np.random.default_rng(int(seed))
        if self._pieces is None:
            self._pieces = subword_draws.PieceTable.of(self._model_proto)
        if nbest > 1 and self._pieces.unigram:
            return subword_draws.nbest_draws(self._pieces, self._sp, texts, alpha, nbest, rng)
        normalized = self._sp.normalize(texts)
        if self._pieces.unigram:
            return subword_draws.unigram_draws(self._pieces, normalized, alpha, rng)
        return [subword_draws.bpe_dropout(self._pieces, text, alpha, rng) for text in normalized]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids` up to the first `<eos>`; `<pad>`/`<bos>` dropped."""
        kept = []
        for index in ids:
            index = int(index)
            if index == vocab.EOS_ID:
                break
            if index not in (vocab.PAD_ID, vocab.BOS_ID):
                kept.append(index)
        return self._sp.decode(kept)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / _MODEL_FILE).write_bytes(self._model_proto)
        meta = {"kind": self.kind, "vocab_size": self.vocab_size, "fingerprint": self.fingerprint}
        (directory / _META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path) -> SentencePieceTokenizer:
        return cls((Path(directory) / _MODEL_FILE).read_bytes())
