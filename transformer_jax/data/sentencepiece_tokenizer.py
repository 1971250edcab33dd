"""SentencePiece tokenizer (unigram or BPE), with the framework's special ids.

Subword vocabularies replace the book's word vocabulary for real runs: no `<unk>` for rare
words and a fixed, configurable vocabulary size.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from transformer_jax.data import vocab

_MODEL_FILE = "spm.model"
_META_FILE = "tokenizer.json"


class SentencePieceTokenizer:
    """Wraps a `sentencepiece.SentencePieceProcessor` trained with PAD/BOS/EOS/UNK = 0/1/2/3."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        self._model_proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._model_proto)
        actual = tuple(self._sp.id_to_piece(i) for i in range(vocab.NUM_SPECIAL))
        if actual != vocab.SPECIAL_TOKENS:
            raise ValueError(
                f"SentencePiece model has special pieces {actual}, expected {vocab.SPECIAL_TOKENS}"
                "; train it with `SentencePieceTokenizer.train`."
            )

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
                num_threads=os.cpu_count() or 1,
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

        Unigram: a segmentation drawn with probability ∝ P(x)^alpha from the `nbest` best
        (-1 = all of them, by forward filtering and backward sampling). BPE: BPE-dropout
        (Provilkov et al. 2020) with merge-dropout probability `alpha`; `nbest` is unused.
        The same (texts, alpha, nbest, seed) always give the same ids: SentencePiece's one
        generator is seeded first and the texts are encoded in order on this thread.
        """
        spm.set_random_generator_seed(int(seed))
        # num_threads=1: a thread pool would draw from the generator in no fixed order.
        return self._sp.encode(
            list(texts), enable_sampling=True, alpha=alpha, nbest_size=nbest, num_threads=1
        )

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
        (directory / _META_FILE).write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, directory: str | Path) -> SentencePieceTokenizer:
        return cls((Path(directory) / _MODEL_FILE).read_bytes())
