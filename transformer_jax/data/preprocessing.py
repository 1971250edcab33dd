"""Text normalisation of sentence pairs, as in d2l "Machine Translation and the Dataset".

The book's `preprocess_nmt` works on the whole file at once; here it is applied to each side of
each pair separately. The only difference: the book would also put a space between a tab and a
sentence-initial `, . ! ?`, which then yields an empty token after `split(' ')`. Per-side
processing avoids that artefact and is identical on every other input.
"""

import re

_NO_BREAK_SPACES = ("\u202f", "\u00a0")  # narrow no-break space, no-break space
_SPACE_BEFORE_PUNCTUATION = re.compile(r"(?<=[^ ])([,.!?])")


def preprocess_nmt(text: str) -> str:
    """The book's preprocessing of one sentence.

    Replaces U+202F and U+00A0 by a space, lowercases, and inserts a space before `, . ! ?`
    when it follows a non-space, so that punctuation becomes its own word-level token
    (`"Go."` -> `"go ."`).
    """
    for char in _NO_BREAK_SPACES:
        text = text.replace(char, " ")
    # The book's character loop (`' ' + char if i > 0 and no_space(char, text[i - 1])`) as one
    # regex: the lookbehind needs a preceding non-space character, so i == 0 is excluded too.
    return _SPACE_BEFORE_PUNCTUATION.sub(r" \1", text.lower())


def preprocess_pair(source: str, target: str, *, book_style: bool = True) -> tuple[str, str]:
    """Normalises a pair: the book's preprocessing, or only whitespace stripping.

    `book_style=False` is meant for other corpora (e.g. WMT) that are tokenised by SentencePiece
    and should keep case and punctuation attachment.
    """
    if book_style:
        return preprocess_nmt(source.strip()), preprocess_nmt(target.strip())
    return source.strip(), target.strip()
