"""configs/fra_eng.py's recipes as data: named sizes, layers over the defaults, `runlocal` as a
last layer, the deprecated `hour`, and each recipe's row in benchmarks/README.md."""

from __future__ import annotations

import re

import pytest

from configs import fra_eng
from tests.helpers import REPO
from transformer_jax.data.config import data_config
from transformer_jax.nn import variants
from transformer_jax.training import config as config_lib
from transformer_jax.training.config import training_defaults


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _changed(a, b) -> set[str]:
    fa, fb = _flat(a.to_dict()), _flat(b.to_dict())
    assert fa.keys() == fb.keys()
    return {k for k in fa if fa[k] != fb[k] or type(fa[k]) is not type(fb[k])}


@pytest.mark.parametrize("name", fra_eng.VARIANTS)
@pytest.mark.parametrize("runlocal", [False, True])
def test_every_recipe_and_size_resolves_and_validates(name, runlocal):
    arg = f"{name},runlocal" if runlocal else name
    c = fra_eng.get_config(arg)
    config_lib.validate_config(c, num_devices=1)
    assert fra_eng.get_config(f"variant={arg}").to_dict() == c.to_dict()


def test_the_readme_model_is_a_named_size():
    # The README run's model is `readme` of nn/variants.py, not edits of another size.
    readme = fra_eng.get_config().model
    assert readme.to_dict() == variants.model_section("readme").to_dict()
    assert readme.model_dim == 128 and readme.share_embeddings and readme.tie_output
    # A model size without a recipe of its own runs on SIZES' recipe, its model untouched.
    small = fra_eng.get_config("small")
    assert small.model.to_dict() == variants.model_section("small").to_dict()
    assert small.schedule == "paper" and not small.data.shared_vocab
    # `readme` needs the default recipe's tied vocabulary, so it is not a recipe argument.
    assert "readme" not in fra_eng.VARIANTS
    with pytest.raises(ValueError, match="Bad config argument 'readme'"):
        fra_eng.get_config("readme")


def test_deep_sampled_is_the_readme_run_plus_exactly_its_layer():
    default, deep = fra_eng.get_config(), fra_eng.get_config("deep_sampled")
    layer = _flat(fra_eng.DEEP_SAMPLED)
    # Every key the layer names changes, and nothing else does.
    assert _changed(default, deep) == set(layer)
    fra_eng._apply(default, fra_eng.DEEP_SAMPLED)
    assert default.to_dict() == deep.to_dict()


def test_recipes_are_layers_over_the_defaults():
    for name, (layers, _) in fra_eng.RECIPES.items():
        c = training_defaults()
        c.data = data_config()
        for overrides in layers:
            fra_eng._apply(c, overrides)
        assert c.to_dict() == fra_eng.get_config(name).to_dict(), name
    # A section's dict merges key by key; the README layer keeps SIZES' lengths.
    assert fra_eng.get_config().data.max_src_len == fra_eng.SIZES["data"]["max_src_len"]


@pytest.mark.parametrize("name", fra_eng.VARIANTS)
def test_runlocal_is_a_last_layer(name):
    full, tiny = fra_eng.get_config(name), fra_eng.get_config(f"{name},runlocal")
    _, runlocal = fra_eng.RECIPES.get(name, (None, (fra_eng.RUNLOCAL, fra_eng.RUNLOCAL_PAIRS)))
    for overrides in runlocal:
        fra_eng._apply(full, overrides)
    assert full.to_dict() == tiny.to_dict()
    assert tiny.num_train_steps == 20 and tiny.data.train_split == "train[:2000]"
    # The README and book models become `tiny`; another size keeps its own.
    expected = "tiny" if name in fra_eng.RECIPES else name
    assert tiny.model.to_dict() == variants.model_section(expected).to_dict()
    # The book keeps its 10-token pairs; every other recipe takes whole pairs of 24 words.
    assert tiny.data.max_src_len == (10 if name == "d2l" else 24)


def test_hour_is_a_deprecated_alias_of_deep_sampled(capsys):
    for old, new in [
        ("hour", "deep_sampled"),
        ("hour,runlocal", "deep_sampled,runlocal"),
        ("variant=hour", "variant=deep_sampled"),
    ]:
        assert fra_eng.get_config(old).to_dict() == fra_eng.get_config(new).to_dict()
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "'hour' is deprecated" in err and "'deep_sampled'" in err
    # The new name says nothing on stderr, and the choices list only it.
    fra_eng.get_config("deep_sampled")
    assert capsys.readouterr().err == ""
    assert "hour" not in fra_eng.VARIANTS


def test_each_recipe_line_names_a_row_of_the_benchmarks_readme():
    rows = re.findall(r'row "([^"]+)"', fra_eng.__doc__)
    assert len(rows) == 4  # default, d2l, deep_sampled, the model sizes
    table_rows = [
        line.split("|")[1].strip()
        for line in (REPO / "benchmarks" / "README.md").read_text().splitlines()
        if line.startswith("| ")
    ]
    for row in rows:
        assert any(r.strip("*`").startswith(row) for r in table_rows), row
    for name in fra_eng.RECIPES:
        assert re.search(rf"^    .*\b{name}\b.*row \"", fra_eng.__doc__, re.M), name
