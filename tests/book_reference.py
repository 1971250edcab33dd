"""The book's (d2l 0.17) data code, transcribed as independent references for the tests."""

from __future__ import annotations

import collections


def book_preprocess_nmt(text):
    """d2l 0.17 `preprocess_nmt`, transcribed from the book, as an independent reference."""

    def no_space(char, prev_char):
        return char in set(",.!?") and prev_char != " "

    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    out = [
        " " + char if i > 0 and no_space(char, text[i - 1]) else char for i, char in enumerate(text)
    ]
    return "".join(out)


class BookVocab:
    """d2l 0.17 `Vocab`, transcribed from the book, as an independent reference."""

    def __init__(self, tokens, min_freq, reserved_tokens):
        counter = collections.Counter(token for line in tokens for token in line)
        self._token_freqs = sorted(counter.items(), key=lambda x: x[1], reverse=True)
        self.idx_to_token = ["<unk>"] + reserved_tokens
        self.token_to_idx = {token: idx for idx, token in enumerate(self.idx_to_token)}
        for token, freq in self._token_freqs:
            if freq < min_freq:
                break
            if token not in self.token_to_idx:
                self.idx_to_token.append(token)
                self.token_to_idx[token] = len(self.idx_to_token) - 1
