"""`data.typography` and `data.text_form.input_form`: what a typed or pasted input becomes
before the tokenizer reads it."""

from transformer_jax.data.text_form import input_form
from transformer_jax.data.typography import plain_forms, with_plain_forms
from transformer_jax.data.vocab import UNK_ID


class CharTokenizer:
    """One id per character it knows, <unk> (3) for the others."""

    def __init__(self, known: str):
        self.ids = {ch: 4 + i for i, ch in enumerate(known)}

    def encode(self, text):
        return [self.ids.get(ch, UNK_ID) for ch in text]


ASCII = CharTokenizer("abcdefghijklmnopqrstuvwxyz .,!?'\"-")


def test_only_typography_the_tokenizer_cannot_read_becomes_plain():
    forms = plain_forms(ASCII)
    assert forms["“"] == '"' and forms["’"] == "'" and forms["…"] == "..."
    # A corpus that writes « » (French) keeps them: its tokenizer knows them.
    french = CharTokenizer("abcdefghijklmnopqrstuvwxyz .,!?'\"«»")
    assert "«" not in plain_forms(french) and "»" not in plain_forms(french)
    assert "“" in plain_forms(french)
    # A plain form the tokenizer cannot read either is no help: left alone.
    assert plain_forms(CharTokenizer("abc")) == {}
    assert with_plain_forms("he said “yes” …", forms) == 'he said "yes" ...'


def test_input_form_of_book_style_data_spaces_what_nfkc_makes():
    """SentencePiece reads NFKC, after the book's preprocessing: "…" and a fullwidth "．"
    must become "..." and "." before it, to be spaced as the training data was."""
    assert input_form("Wait… what?", book=True) == input_form("Wait... what?", book=True)
    assert input_form("Wait... what?", book=True) == "wait . . . what ?"
    assert input_form("I lost my keys．", book=True) == "i lost my keys ."
    assert input_form("He said “yes”.", book=True, plain=plain_forms(ASCII)) == 'he said "yes" .'
    # Raw-text data is left as written, apart from control characters and the ends.
    assert input_form("  Wait…\twhat? ", book=False) == "Wait… what?"
    assert input_form("\x1b[31m", book=True) == ""
    # A target prefix keeps its own typography (plain=None).
    assert input_form("« Oui", book=True) == "« oui"
