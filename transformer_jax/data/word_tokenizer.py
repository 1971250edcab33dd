"""Word-level tokenizer: the d2l book's `tokenize_nmt` + `Vocab`, for parity with its results.

Book (d2l 0.17, "Machine Translation and the Dataset"): tokens are `line.split(' ')`; the
vocabulary keeps tokens seen at least `min_freq` (2) times, ordered by decreasing frequency
(ties in order of first appearance, as Python's stable sort of a Counter gives), after the
reserved tokens. Only the special tokens' ids differ from the book (see vocab.py).
"""

from __future__ import annotations

import collections
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from transformer_jax.data import vocab

_VOCAB_FILE = "vocab.txt"
_META_FILE = "tokenizer.json"


class WordTokenizer:
    """Maps space-separated words to ids; unknown words map to `<unk>` (UNK_ID)."""

    kind = "word"

    def __init__(self, tokens: Sequence[str]):
        """`tokens`: the full id -> token list, starting with `vocab.SPECIAL_TOKENS`."""
        if tuple(tokens[: vocab.NUM_SPECIAL]) != vocab.SPECIAL_TOKENS:
            raise ValueError(
                f"a word vocabulary must start with {vocab.SPECIAL_TOKENS}, got "
                f"{tuple(tokens[: vocab.NUM_SPECIAL])}"
            )
        self._id_to_token = list(tokens)
        self._token_to_id = {token: i for i, token in enumerate(self._id_to_token)}
        if len(self._token_to_id) != len(self._id_to_token):
            raise ValueError("duplicate tokens in the word vocabulary")

    @classmethod
    def train(cls, sentences: Iterable[str], min_freq: int = 2) -> WordTokenizer:
        """Builds the book's vocabulary from (already preprocessed) training sentences."""
        counter = collections.Counter()
        for sentence in sentences:
            counter.update(sentence.split(" "))
        # Like d2l's Vocab: sort by frequency, descending; sorted() is stable, so ties keep the
        # Counter's first-appearance order.
        by_freq = sorted(counter.items(), key=lambda item: item[1], reverse=True)
        tokens = list(vocab.SPECIAL_TOKENS)
        seen = set(tokens)
        for token, freq in by_freq:
            if freq < min_freq:
                break
            if token not in seen:
                tokens.append(token)
                seen.add(token)
        return cls(tokens)

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_token)

    @property
    def fingerprint(self) -> str:
        """sha256 of the ordered vocabulary: equal iff every id means the same token."""
        return hashlib.sha256("\n".join(self._id_to_token).encode()).hexdigest()[:16]

    def token_to_id(self, token: str) -> int:
        return self._token_to_id.get(token, vocab.UNK_ID)

    def id_to_token(self, index: int) -> str:
        return self._id_to_token[index]

    def encode(self, text: str) -> list[int]:
        """Ids of the words of `text` (split on single spaces, as the book); no specials added."""
        return [self._token_to_id.get(token, vocab.UNK_ID) for token in text.split(" ")]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids` up to the first `<eos>`; `<pad>` and `<bos>` are dropped, `<unk>` kept."""
        words = []
        for index in ids:
            index = int(index)
            if index == vocab.EOS_ID:
                break
            if index in (vocab.PAD_ID, vocab.BOS_ID):
                continue
            words.append(self._id_to_token[index])
        return " ".join(words)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / _VOCAB_FILE).write_text("\n".join(self._id_to_token) + "\n", encoding="utf-8")
        meta = {"kind": self.kind, "vocab_size": self.vocab_size, "fingerprint": self.fingerprint}
        (directory / _META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path) -> WordTokenizer:
        text = (Path(directory) / _VOCAB_FILE).read_text(encoding="utf-8")
        return cls(text.split("\n")[:-1])
