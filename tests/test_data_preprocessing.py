"""The book's preprocessing and reading of the archive, on hand-made inputs."""

import zipfile

import pytest

from tests.book_reference import book_preprocess_nmt
from transformer_jax.data import corpus, preprocessing

pytest_plugins = ["tests.conftest_data"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # The book's own examples (d2l "Machine Translation and the Dataset").
        ("Go.", "go ."),
        ("Va !", "va !"),
        ("Hi.", "hi ."),
        ("Salut !", "salut !"),
        ("Cours\u202f!", "cours !"),  # narrow no-break space becomes a plain space
        ("Courez\u00a0!", "courez !"),  # no-break space too
        ("Wait, what?", "wait , what ?"),
        ("Hello!!", "hello ! !"),  # each mark follows a non-space
        ("...", ". . ."),
        ("I'm OK.", "i'm ok ."),
    ],
)
def test_preprocess_nmt_matches_book(raw, expected):
    assert preprocessing.preprocess_nmt(raw) == expected


def test_book_first_line_pair():
    assert preprocessing.preprocess_pair("Go.", "Va !") == ("go .", "va !")


def test_non_book_preprocessing_only_strips():
    assert preprocessing.preprocess_pair(" Go. ", "Va!", book_style=False) == ("Go.", "Va!")


def test_read_pairs_counts_malformed_lines(tmp_path, make_zip):
    lines = [
        "Go.\tVa !",
        "no tab here",
        "\tempty english",
        "empty french\t ",
        b"bad utf8 \xff\xfe\tmauvais",
        "",
        "Hi.\tSalut !\tCC-BY attribution column",
        "Run!\tCours\u202f!",
    ]
    path = make_zip(tmp_path / "c.zip", lines)
    report = corpus.ReadReport()
    got = [(x.line_number, x.english, x.french) for x in corpus.read_pairs(path, report)]
    assert got == [(0, "Go.", "Va !"), (6, "Hi.", "Salut !"), (7, "Run!", "Cours\u202f!")]
    assert report.as_dict() == {
        "kept": 3,
        "blank": 2,  # the empty line and the final newline
        "malformed": {"bad_utf8": 1, "no_tab": 1, "empty_side": 2},
    }


def test_macosx_entries_are_ignored(tmp_path, make_zip):
    path = make_zip(tmp_path / "c.zip", ["Go.\tVa !"], macosx=True)
    with zipfile.ZipFile(path) as archive:
        assert "__MACOSX/fra-eng/._fra.txt" in archive.namelist()
        assert corpus.find_member(archive) == "fra-eng/fra.txt"


def test_archive_without_fra_txt_is_a_clear_error(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("something/else.txt", "x")
    with pytest.raises(corpus.CorruptArchiveError, match="fra.txt"):
        list(corpus.read_pairs(path))


def test_truncated_zip_is_a_clear_error(tmp_path, make_zip):
    good = make_zip(tmp_path / "good.zip", ["Go.\tVa !"] * 100)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(corpus.CorruptArchiveError, match="truncated"):
        list(corpus.read_pairs(bad))


def test_preprocess_nmt_equals_book_loop_on_random_text():
    import random

    rng = random.Random(0)
    alphabet = "aB .,!?\u202f\u00a0'éÀ-\t"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert preprocessing.preprocess_nmt(text) == book_preprocess_nmt(text), repr(text)
