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
  only where case carries meaning (not sentence-initial), kept if a capitalised form is
  almost always the word's (`MIN_SHARE` of at least `MIN_COUNT` uses: "mars" the month and
  "marie" the verb are no names), a hyphenated compound counted whole ("États-Unis" makes
  no "Unis"), and where the word after one word has another form, that form in that
  context ("se marie" against "Marie"; "l'armée du Salut", a rare fixed phrase, against
  "salut");
- else a word the input itself capitalised inside a sentence (a name or acronym the corpus
  never saw: "I met Zoltan in NYC" keeps "Zoltan" and "NYC" in the translation), at the
  translation's use that matches the capitalised one in order ("Marine Le Pen likes the
  cat": "Marine Le Pen aime le chat", not "Le chat");
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
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from transformer_jax.data.segmenting import ABBREVIATIONS
from transformer_jax.runtime.atomic_files import write_text_atomically

TRUECASER_FILE = "truecaser.json"  # beside a run's (and an export's) tokenizers
# The version of what `learn_forms` learns, in the name of a cached table
# (`truecase_table.build_truecaser`): a table learned by an older rule is learned again.
# 2: MIN_SHARE, whole compounds and context forms (was: a simple majority).
RULE_VERSION = 2
MIN_COUNT = 2  # occurrences a learned form needs: one capitalised typo is not a name
# Share of a word's uses inside sentences a capitalised form needs to be learned: a name is
# almost always capitalised; "marie" (a verb too), "mars" (the month) and "Nations" are not.
MIN_SHARE = 0.9
# Capitalised uses after one and the same word that make a form the word's everywhere;
# fewer, it is learned for that context only (a fixed phrase: "l'armée du Salut").
MIN_SPREAD_COUNT = 5

# A word for casing purposes: a run of letters ("l'homme" is "l" and "homme"), so elisions
# take their parts' forms; _TOKEN keeps a hyphenated compound whole ("États-Unis" is a
# name, "unis" alone is not).
_WORD = re.compile(r"[^\W\d_]+")
_TOKEN = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")
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


def _inner_tokens(sentence: str) -> Iterator[tuple[str, str]]:
    """(previous word lowercased, or "" for none; word) for each word of `sentence` that does
    not open a sentence: the uses whose case carries meaning, with their context."""
    previous = ""
    for match in _TOKEN.finditer(sentence):
        if not _initial(sentence, match.start()):
            yield previous, match.group()
        previous = match.group().lower()


def _usual_form(seen: collections.Counter, min_count: int) -> str:
    """The form of a word (or of a word in one context) that `seen` counts almost always:
    capitalised only if at least `min_count` uses and `MIN_SHARE` of them are; else the
    lowercase form. A word also common in lowercase ("marie", "mars") is no name."""
    form, count = seen.most_common(1)[0]
    lower = form.lower()
    if form != lower and count >= min_count and count >= MIN_SHARE * sum(seen.values()):
        return form
    return lower


def _word_form(seen: collections.Counter, contexts: int, min_count: int) -> str:
    """A word's form everywhere: `_usual_form`, if its capitalised uses are spread over two
    contexts or many (a rare word always after the same word, "armée du Salut", is a fixed
    phrase: it keeps its form in that context only, `_context_forms`)."""
    form = _usual_form(seen, min_count)
    capitals = seen[form]
    if form != form.lower() and contexts < 2 and capitals < MIN_SPREAD_COUNT:
        return form.lower()
    return form


def _context_forms(
    lower: str, default: str, by_context: Mapping[str, collections.Counter], min_count: int
) -> dict[str, str]:
    """{"previous word": form} where the word's usual form after that word differs from its
    `default` ("se marie" against "Marie"; "du Salut" against "salut")."""
    forms = {}
    for previous, seen in by_context.items():
        form = _usual_form(seen, min_count)
        if previous and sum(seen.values()) >= min_count and form != default:
            forms[f"{previous} {lower}"] = form
    return forms


def learn_forms(sentences: Iterable[str], min_count: int = MIN_COUNT) -> dict[str, str]:
    """{lowercase word: its usual cased form} from raw (cased) sentences, and {"previous
    word": form} where the word after that word has another form.

    Only words inside a sentence count (a sentence-initial capital says nothing about the
    word); a form is kept when it is not all lowercase and `MIN_SHARE` of the word's uses, at
    least `min_count` (`_usual_form`); a hyphenated compound counts as one word ("États-Unis"
    says nothing of "unis"). Words usually lowercase are left out (the table holds only what
    changes a translation); the keys with a space are read by `Truecaser.natural` only.
    """
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    by_context: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter)
    )
    for sentence in sentences:
        for previous, word in _inner_tokens(sentence):
            counts[word.lower()][word] += 1
            by_context[word.lower()][previous][word] += 1
    forms = {}
    for lower, seen in counts.items():
        if len(seen) == 1 and lower in seen:
            continue  # only ever lowercase: nothing to learn
        capitalised = sum(1 for c in by_context[lower].values() if c.total() > c[lower])
        default = _word_form(seen, capitalised, min_count)
        if default != lower:
            forms[lower] = default
        forms.update(_context_forms(lower, default, by_context[lower], min_count))
    return dict(sorted(forms.items()))


def source_forms(source: str) -> dict[str, str]:
    """{lowercase: form} of the words `source` capitalises inside a sentence (names, acronyms
    it holds), single letters left out (English "I" is no name)."""
    forms = {}
    for uses in _source_uses(source).values():
        for form in uses:
            if form is not None:
                forms.setdefault(form.lower(), form)
    return forms


def _source_uses(source: str) -> dict[str, list[str | None]]:
    """{lowercase word: its form at each of its uses inside a sentence of `source`, None where
    lowercase} for the words `source` capitalises there (single letters left out).

    `natural` matches them in order with the translation's uses of the same word inside a
    sentence: "I met Rose. Rose likes the pink dress." has one such "Rose", so the
    translation's second inner "rose" (the colour) stays lowercase; "The cat saw Le Pen"
    capitalises one "le", not every article.
    """
    uses: dict[str, list[str | None]] = collections.defaultdict(list)
    for _, word in _inner_tokens(source):
        uses[word.lower()].append(word if word != word.lower() else None)
    return {
        lower: forms
        for lower, forms in uses.items()
        if len(lower) > 1 and any(form is not None for form in forms)
    }


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
        spaced = _SPACED.get(self.target_lang, _SPACED[None])
        return spaced.sub(r"\1", _TOKEN.sub(self._recaser(translation, source), translation))

    def _recaser(self, translation: str, source: str) -> Callable[[re.Match], str]:
        """The `re.sub` callback that gives each word of `translation` its form: learned
        (`learned`), else the source's at the same place among the word's uses inside a
        sentence (`_source_uses`), else as written; capitalised at a sentence start."""
        uses = _source_uses(source)
        inner_uses: collections.Counter = collections.Counter()
        previous = ""

        def recase(match: re.Match) -> str:
            nonlocal previous
            word, lower = match.group(), match.group().lower()
            initial = _initial(translation, match.start())
            form = self.learned(previous, word)
            if lower in uses and not initial:
                index = inner_uses[lower]
                inner_uses[lower] += 1
                if form is None and index < len(uses[lower]):
                    form = uses[lower][index]
            previous = lower
            form = form or word
            return _capitalize(form) if initial else form

        return recase

    def learned(self, previous: str, word: str) -> str | None:
        """`word`'s learned form after the word `previous` (lowercase), None if none was
        learned; a compound not learned as a whole takes its parts' forms ("jean-luc")."""
        lower = word.lower()
        form = self.forms.get(f"{previous} {lower}", self.forms.get(lower))
        if form is not None or "-" not in word:
            return form
        parts = word.split("-")
        befores = [previous, *(part.lower() for part in parts[:-1])]
        forms = [
            self.forms.get(f"{b} {p.lower()}", self.forms.get(p.lower()))
            for b, p in zip(befores, parts, strict=True)
        ]
        if all(form is None for form in forms):
            return None
        return "-".join(form or part for form, part in zip(forms, parts, strict=True))

    # --- storage ---------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Writes the table as UTF-8 JSON (`load` reads it back), whatever the locale: its
        forms hold "É" and "œ", which an ASCII locale cannot write and a Latin-1 one writes
        as bytes that are not UTF-8. Written beside `path` and renamed into place, so a
        failure leaves no empty or half-written table (in the shared cache too)."""
        data = {"target_lang": self.target_lang, "forms": dict(self.forms)}
        write_text_atomically(path, json.dumps(data, ensure_ascii=False, indent=0) + "\n")

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
