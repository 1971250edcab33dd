"""Natural text from book-style translations: learned word forms, punctuation, capitals."""

from __future__ import annotations

import json

import pytest

from transformer_jax.data import config as config_lib
from transformer_jax.data import datasets
from transformer_jax.data.truecase_table import build_truecaser
from transformer_jax.data.truecasing import Truecaser, learn_forms, shouted, source_forms

pytest_plugins = ["tests.conftest_data"]

RAW_FRENCH = [
    "Tom est là.",
    "Je vois Tom.",
    "Où est Tom ?",
    "Marie aime Paris.",
    "Il habite à Paris.",
    "Paris est belle.",  # sentence-initial: not counted for "paris"
    "Il aime le Japon.",  # once: below MIN_COUNT
    "Le Vin est bon. Le vin est bon. Le vin est bon.",  # "vin" mostly lowercase
    "Bonjour. Bonjour ! Allez.",  # every "Bonjour" / "Allez" opens a sentence
    "« Marie ? » Oui, Marie.",  # the first opens a sentence (after «)
    "C'est Marie.",
    "Mon CD est là, ton CD aussi.",
]


def test_learned_forms_count_words_inside_sentences_by_majority():
    forms = learn_forms(RAW_FRENCH)
    assert forms == {"cd": "CD", "marie": "Marie", "paris": "Paris", "tom": "Tom"}
    assert learn_forms(RAW_FRENCH, min_count=1)["japon"] == "Japon"
    assert "vin" not in learn_forms(RAW_FRENCH, min_count=1)  # 1 "Vin" against 2 "vin"
    assert "bonjour" not in forms and "allez" not in forms and "il" not in forms


def test_source_forms_keep_names_and_acronyms_capitalised_inside_a_sentence():
    assert source_forms("I met Zoltan in NYC. Then I left.") == {"zoltan": "Zoltan", "nyc": "NYC"}
    assert source_forms("Tom left.") == {}  # sentence-initial: a capital that says nothing
    assert source_forms("i met zoltan .") == {}


@pytest.mark.parametrize(
    ("lang", "translation", "want"),
    [
        ("fr", "je pense que tom a raison .", "Je pense que Tom a raison."),
        ("fr", "va ! où est-il ?", "Va ! Où est-il ?"),  # French keeps its space before ! ?
        ("en", "go ! where is he ?", "Go! Where is he?"),
        ("fr", "il a payé 3 ,000 dollars , je crois .", "Il a payé 3,000 dollars, je crois."),
        ("fr", "attends . . . c'est l'europe .", "Attends... C'est l'Europe."),
        ("fr", "« où est marie ? » dit-il .", "« Où est Marie ? » dit-il."),
        ("fr", "", ""),
        ("fr", "3 chats .", "3 chats."),  # no letter to capitalise first
    ],
)
def test_natural_text(lang, translation, want):
    truecaser = Truecaser(lang, {"tom": "Tom", "marie": "Marie", "europe": "Europe"})
    assert truecaser.natural(translation) == want


def test_natural_text_takes_names_from_the_source_and_prefers_the_learned_form():
    truecaser = Truecaser("fr", {"nyc": "NYC"})
    got = truecaser.natural("j'ai vu zoltan à nyc .", source="I saw Zoltan in Nyc.")
    assert got == "J'ai vu Zoltan à NYC."
    assert Truecaser("fr").natural("j'ai vu zoltan .", source="i saw zoltan .") == (
        "J'ai vu zoltan."
    )


def test_a_source_in_capitals_gets_a_translation_in_capitals_not_acronyms():
    truecaser = Truecaser("fr", {"tom": "Tom"})
    got = truecaser.natural("la radio est allumée , tom .", source="THE RADIO IS ON, TOM.")
    assert got == "LA RADIO EST ALLUMÉE, TOM."  # not "La RADIO est allumée, Tom."
    assert shouted("I SAW TOM IN NYC!") and shouted("GO AWAY")
    assert not shouted("NASA.") and not shouted("I met Tom in NYC.") and not shouted("A B C")
    assert not shouted("") and not shouted("42 !")
    # One acronym in a sentence is still one acronym.
    assert truecaser.natural("j'aime la nasa .", source="I like NASA.") == "J'aime la NASA."


def test_save_load_round_trip_and_a_corrupt_table(tmp_path):
    truecaser = Truecaser("fr", {"tom": "Tom", "élodie": "Élodie"})
    truecaser.save(tmp_path / "t.json")
    assert Truecaser.load(tmp_path / "t.json") == truecaser
    (tmp_path / "bad.json").write_text('{"forms": [1, 2]}')
    with pytest.raises(ValueError, match=r"bad\.json is not a truecaser table"):
        Truecaser.load(tmp_path / "bad.json")


def _name(i: int) -> str:
    return "Nom" + "abcdefghij"[i // 10] + "abcdefghij"[i % 10]


def _lines() -> list[str]:
    """40 pairs, each with a French name of its own (twice) and two shared ones."""
    return [
        f"I see number {i}.\tJe vois {_name(i)}, {_name(i)} et Jean à Boston." for i in range(40)
    ]


def test_build_truecaser_learns_from_the_training_pairs_only_and_caches(
    make_zip, make_cfg, tmp_path, caplog
):
    cfg = make_cfg(make_zip(tmp_path / "fra-eng.zip", _lines()))
    train = datasets.load_split_pairs(cfg, cfg.train_split)
    held_out = datasets.load_split_pairs(cfg, "test") + datasets.load_split_pairs(cfg, "validation")
    assert train and held_out
    truecaser = build_truecaser(cfg, train, tmp_path / "cache")
    assert truecaser.target_lang == "fr"
    assert truecaser.forms["jean"] == "Jean" and truecaser.forms["boston"] == "Boston"
    names = {w for w in truecaser.forms if w.startswith("nom")}
    assert names == {_name(int(src.split()[3])).lower() for src, _ in train}  # none held out
    cached = list((tmp_path / "cache").glob("truecaser-fr-*.json"))
    assert len(cached) == 1
    cached[0].write_text(json.dumps({"target_lang": "fr", "forms": {"x": "X"}}))
    assert build_truecaser(cfg, train, tmp_path / "cache").forms == {"x": "X"}  # the cache
    cached[0].write_text('{"target_lang": "fr", "for')  # damaged: learned again, rewritten
    assert build_truecaser(cfg, train, tmp_path / "cache") == truecaser
    assert Truecaser.load(cached[0]) == truecaser
    assert "cannot be read (" in caplog.text and "learning it again" in caplog.text


def test_build_truecaser_without_the_zip_or_for_data_kept_as_written(make_zip, make_cfg, tmp_path):
    zip_path = make_zip(tmp_path / "fra-eng.zip", _lines())
    cfg = make_cfg(zip_path)
    train = datasets.load_split_pairs(cfg, cfg.train_split)
    zip_path.unlink()  # built elsewhere: the raw text is gone
    assert build_truecaser(cfg, train, tmp_path / "cache") == Truecaser("fr")
    other = config_lib.data_config()
    other.name = "ted_hrlr_translate/pt_to_en"
    assert build_truecaser(other, train, tmp_path / "cache") is None


def test_build_truecaser_for_another_dataset_in_the_book_form(tmp_path):
    import tensorflow_datasets as tfds

    cfg = config_lib.data_config()
    cfg.name, cfg.source_lang, cfg.target_lang = "ted_hrlr_translate/pt_to_en", "pt", "en"
    cfg.data_dir, cfg.book_preprocessing = str(tmp_path / "tfds"), True
    records = [
        {"pt": "Vi o João.", "en": "I saw John, and John saw me."},
        {"pt": "Olá!", "en": "Hello, I am here."},
        {"pt": "Sim.", "en": "Yes, I know."},
    ]
    with tfds.testing.mock_data(as_data_source_fn=lambda *args, **kwargs: records):
        train = datasets.load_split_pairs(cfg, "train")
        truecaser = build_truecaser(cfg, train, tmp_path / "cache")
    assert train[0] == ("vi o joão .", "i saw john , and john saw me .")
    assert truecaser == Truecaser("en", {"i": "I", "john": "John"})
    assert truecaser.natural("hello , i saw john !") == "Hello, I saw John!"


def test_a_table_that_cannot_be_cached_is_used_uncached(make_zip, make_cfg, tmp_path, monkeypatch):
    import errno

    cfg = make_cfg(make_zip(tmp_path / "fra-eng.zip", _lines()))
    train = datasets.load_split_pairs(cfg, cfg.train_split)

    def read_only(self, path):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(Truecaser, "save", read_only)
    truecaser = build_truecaser(cfg, train, tmp_path / "cache")
    assert truecaser.forms["jean"] == "Jean"
    assert not list((tmp_path / "cache").glob("truecaser-*.json"))

    def full_disk(self, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Truecaser, "save", full_disk)  # not read-only: still an error
    with pytest.raises(OSError, match="No space left"):
        build_truecaser(cfg, train, tmp_path / "cache")
