"""Natural text from book-style translations: learned word forms, punctuation, capitals."""

from __future__ import annotations

import json

import pytest

from transformer_jax.data import config as config_lib
from transformer_jax.data import datasets, truecase_table
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
    # Once, after "le": a fixed phrase for all it shows, learned in that context only.
    assert learn_forms(RAW_FRENCH, min_count=1)["le japon"] == "Japon"
    assert "vin" not in learn_forms(RAW_FRENCH, min_count=1)  # 1 "Vin" against 2 "vin"
    assert "bonjour" not in forms and "allez" not in forms and "il" not in forms


def _times(n: int, *sentences: str) -> list[str]:
    return list(sentences) * n


def test_a_word_also_common_in_lowercase_is_not_learned_as_a_name():
    # "Mars" the planet 3 times, "mars" the month twice: capitalised, but not almost always.
    raw = _times(1, "Il va sur Mars.", "Il rêve de Mars.", "Il pense à Mars.")
    raw += _times(1, "Il part en mars.", "Il vient début mars.")
    truecaser = Truecaser("fr", learn_forms(raw))
    assert "mars" not in truecaser.forms
    assert truecaser.natural("il se marie en mars .") == "Il se marie en mars."
    # Almost always capitalised: still a name ("Tom" here 20 times, "tom" once).
    assert learn_forms(_times(10, "Je vois Tom.", "Avec Tom.") + ["Un tom basse."])["tom"] == "Tom"


def test_a_compound_is_learned_whole_not_as_its_parts():
    raw = _times(3, "Il vit aux États-Unis.", "Je vais aux États-Unis.") + ["Nous sommes unis."]
    truecaser = Truecaser("fr", learn_forms(raw))
    assert truecaser.forms == {"états-unis": "États-Unis"}
    assert truecaser.natural("nous sommes unis .") == "Nous sommes unis."
    assert truecaser.natural("j'aime les états d'âme .") == "J'aime les états d'âme."
    assert truecaser.natural("il vit aux états-unis .") == "Il vit aux États-Unis."
    # A compound not learned whole takes its parts' forms; other compounds stay as written.
    jean = Truecaser("fr", {"jean": "Jean"})
    assert jean.natural("c'est jean-luc , dit-il .") == "C'est Jean-luc, dit-il."


def test_a_name_that_is_also_a_word_keeps_its_lowercase_contexts():
    raw = _times(15, "Je vois Marie.", "Tom aime Marie.", "Avec Marie, oui.")
    raw += _times(1, "Il se marie demain.", "Elle se marie.", "Je me marie.", "Tu me marie.")
    truecaser = Truecaser("fr", learn_forms(raw))
    assert truecaser.forms["marie"] == "Marie"  # 45 of 49 uses; after "se" and "me", lowercase
    assert truecaser.forms["se marie"] == "marie" and truecaser.forms["me marie"] == "marie"
    got = truecaser.natural("tom se marie avec marie .", source="Tom is marrying Mary.")
    assert got == "Tom se marie avec Marie."


def test_a_rare_form_seen_in_one_context_only_is_kept_there_only():
    truecaser = Truecaser("fr", learn_forms(_times(2, "Il aide l'armée du Salut.")))
    assert truecaser.forms == {"du salut": "Salut"}
    assert truecaser.natural("elle a dit salut à tout le monde .") == (
        "Elle a dit salut à tout le monde."
    )
    assert truecaser.natural("merci à l'armée du salut .") == "Merci à l'armée du Salut."


@pytest.mark.parametrize(
    ("translation", "source", "want"),
    [
        (
            "marine le pen aime le chat .",
            "Marine Le Pen likes the cat.",
            "Marine Le Pen aime le chat.",
        ),
        (
            "je lis le monde dans le train .",
            "I read Le Monde on the train.",
            "Je lis Le Monde dans le train.",
        ),
        (
            "j'ai rencontré rose . rose aime la robe rose .",
            "I met Rose. Rose likes the pink dress.",
            "J'ai rencontré Rose. Rose aime la robe rose.",
        ),
        ("la rose est pour rose .", "The rose is for Rose.", "La rose est pour Rose."),
        ("le chat a vu le pen .", "The cat saw Le Pen.", "Le chat a vu Le Pen."),
        ("zoltan aime zoltan .", "Zoltan likes Zoltan.", "Zoltan aime Zoltan."),
    ],
)
def test_a_source_capital_recases_the_matching_use_only(translation, source, want):
    """The source's uses of a word inside a sentence, matched in order with the
    translation's: a name copied into the translation, not every "le" or "rose"."""
    assert Truecaser("fr").natural(translation, source) == want


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
    make_zip, make_cfg, tmp_path, caplog, monkeypatch
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
    # A table an older rule learned is not served: the rule's version is in the cache's name.
    monkeypatch.setattr(truecase_table, "RULE_VERSION", truecase_table.RULE_VERSION + 1)
    cached[0].write_text(json.dumps({"target_lang": "fr", "forms": {"x": "X"}}))
    assert build_truecaser(cfg, train, tmp_path / "cache") == truecaser


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
