"""Translations as text to read: the book's lowercasing and punctuation spacing undone.

The book's data is lowercased with `, . ! ?` spaced off (`preprocessing.preprocess_nmt`), so
a model trained on it writes "je pense que tom a raison ." evaluate scores that form (both
sides lowercased, the punctuation joined back: `data.text_form.detokenize_book`); a reader
wants "Je pense que Tom a raison." `Truecaser.natural` gives that, from what is known rather
than guessed by another model (as Moses' truecaser and detokenizer do for lowercased
systems):

- punctuation as the target language sets it: joined to the word before it, except that
  French keeps its space before `!` and `?` (the corpus's own French: "Va !");
- a capital at the start of every sentence (after `. ! ? …`, not after an abbreviation's
  full stop, nor after "?" or "!" closed by a quote: « Où vas-tu ? » dit-il);
- inside a sentence, a word's usual form in the training targets ("tom" -> "Tom", "paris"
  -> "Paris", "japon" -> "Japon"), learned from the raw corpus by `learn_forms`: counted
  only where case carries meaning (not sentence-initial), kept if one capitalised form is
  the majority of at least `MIN_COUNT` occurrences;
- else a word the input itself capitalised inside a sentence (a name or acronym the corpus
  never saw: "I met Zoltan in NYC" keeps "Zoltan" and "NYC" in the translation);
- an input written all in capitals ("THE RADIO IS ON.": `shouted`) says nothing of its
  words' forms: its translation is written all in capitals too ("LA RADIO EST ALLUMÉE."),
  as a reader of such input expects, instead of every word taken for an acronym.

Pure Python (no JAX): both translate engines use it. A run trained before the table existed
gets the first three rules without learned forms (`Truecaser(target_lang)`).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from transformer_jax.data.segmenting import ABBREVIATIONS

TRUECASER_FILE = "truecaser.json"  # beside a run's (and an export's) tokenizers
MIN_COUNT = 2  # occurrences a learned form needs: one capitalised typo is not a name

# A word for casing purposes: a run of letters ("l'homme" is "l" and "homme"; "jean-luc" is
# "jean" and "luc"), so elisions and compounds take their parts' forms.
_WORD = re.compile(r"[^\W\d_]+")
# What may stand between a sentence end and the next sentence's first word: blanks, quotes,
# brackets, dashes. After "?" or "!" and a closing quote a sentence goes on ("« Où ? » dit-il",
# '"Why?" she asked'); after "." it does not.
_BLANKS_AND_QUOTES = " \t\u00a0\u202f\"'«»“”‘’„()[]-–—"
_CLOSERS = "\"'»”’)]"
_SENTENCE_ENDS = ".!?…"
# The book's spacing, undone: a space before , or . always; before ! and ? unless French.
_SPACED = {"fr": re.compile(r" ([,.])"), None: re.compile(r" ([,.!?])")}


def _after_abbreviation(text: str, dot: int) -> bool:
    """Whether the "." at `dot` follows an abbreviation or an initial (`segmenting`'s rule:
    "mr . smith", "j . k . rowling"; "i" and "a" are words)."""
    end = dot
    while end > 0 and text[end - 1] == " ":
        end -= 1
    begin = end
    while begin > 0 and not text[begin - 1].isspace():
        begin -= 1
    word = text[begin:end].lower().strip(".")
    return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha() and word not in "ia")


def _initial(text: str, start: int) -> bool:
    """Whether the word at `start` opens a sentence: only blanks and quotes between it and
    the start of the text or a sentence end (not an abbreviation's full stop, not "?" or "!"
    closed by a quote)."""
    i, closed = start, False
    while i > 0 and text[i - 1] in _BLANKS_AND_QUOTES:
        closed |= text[i - 1] in _CLOSERS
        i -= 1
    if i == 0:
        return True
    end = text[i - 1]
    if end not in _SENTENCE_ENDS or (closed and end in "?!"):
        return False
    return not (end == "." and _after_abbreviation(text, i - 1))


def learn_forms(sentences: Iterable[str], min_count: int = MIN_COUNT) -> dict[str, str]:
    """{lowercase word: its usual cased form} from raw (cased) sentences.

    Only words inside a sentence count (a sentence-initial capital says nothing about the
    word); a form is kept when it is not all lowercase and is more than half of the word's
    at least `min_count` occurrences. Words usually lowercase are left out (the table holds
    only what changes a translation).
    """
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for sentence in sentences:
        for match in _WORD.finditer(sentence):
            if not _initial(sentence, match.start()):
                counts[match.group().lower()][match.group()] += 1
    forms = {}
    for lower, seen in counts.items():
        form, count = seen.most_common(1)[0]
        total = sum(seen.values())
        if form != lower and total >= min_count and 2 * count > total:
            forms[lower] = form
    return dict(sorted(forms.items()))


def source_forms(source: str) -> dict[str, str]:
    """{lowercase: form} of the words `source` capitalises inside a sentence (names, acronyms
    it holds), single letters left out (English "I" is no name)."""
    forms = {}
    for match in _WORD.finditer(source):
        word = match.group()
        if len(word) > 1 and word != word.lower() and not _initial(source, match.start()):
            forms.setdefault(word.lower(), word)
    return forms


def shouted(source: str) -> bool:
    """Whether `source` is written all in capitals: at least two words of two letters or
    more, and no lowercase letter ("NASA." alone is an acronym, not shouting)."""
    words = [w for w in _WORD.findall(source) if len(w) > 1]
    return len(words) >= 2 and not any(c.islower() for w in words for c in w)


def _capitalize(word: str) -> str:
    return word[:1].upper() + word[1:]


@dataclasses.dataclass(frozen=True)
class Truecaser:
    """Book-style translations -> natural text (module docstring) for one target language.

    target_lang: the data's target language code ("fr" keeps a space before ! and ?).
    forms: {lowercase word: usual form} (`learn_forms`); empty for a run without a table.
    """

    target_lang: str
    forms: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def natural(self, translation: str, source: str = "") -> str:
        """`translation` (the book's form) with punctuation joined and capitals restored;
        `source` is the input as the user wrote it (its capitalised names are kept; written
        all in capitals, the translation is too)."""
        if shouted(source):
            return self.natural(translation).upper()
        known = {**source_forms(source), **self.forms}

        def recase(match: re.Match) -> str:
            form = known.get(match.group().lower(), match.group())
            return _capitalize(form) if _initial(translation, match.start()) else form

        spaced = _SPACED.get(self.target_lang, _SPACED[None])
        return spaced.sub(r"\1", _WORD.sub(recase, translation))

    # --- storage ---------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Writes the table as JSON (`load` reads it back)."""
        data = {"target_lang": self.target_lang, "forms": dict(self.forms)}
        Path(path).write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Truecaser:
        """A saved table; a file that is not one is a ValueError naming it."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(str(data["target_lang"]), {str(k): str(v) for k, v in data["forms"].items()})
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(
                f"{path} is not a truecaser table ({error}); delete it to translate without "
                "learned capitals, or copy it again from the run's tokenizer directory."
            ) from error
