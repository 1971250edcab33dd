import pytest

from configs import model as model_configs
from transformer_jax.nn import ModelConfig
from transformer_jax.nn.config import field_names


def _cfg(**kw):
    return ModelConfig(src_vocab_size=10, tgt_vocab_size=10, **kw)


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(model_dim=30, num_heads=4), r"model_dim=30 is not divisible by model.num_heads=4"),
        (dict(dropout_rate=1.0), r"dropout_rate=1.0 is outside \[0, 1\)"),
        (dict(attention_dropout_rate=-0.1), r"attention_dropout_rate=-0.1 is outside"),
        (
            dict(norm_placement="sandwich"),
            r"'sandwich' is not valid; choose one of \['post', 'pre'",
        ),
        (dict(attention_kind="linear"), r"choose one of \['dot', 'additive'\]"),
        (dict(positional="rotary"), r"choose one of \['sinusoidal', 'learned'\]"),
        (dict(norm_kind="batch"), r"choose one of \['layer', 'rms'\]"),
        (dict(activation="swish"), r"choose one of \['relu', 'gelu'\]"),
        (dict(dtype="float16"), r"choose one of \['float32', 'bfloat16', 'auto'\]"),
        (dict(ffn_dim=0), r"ffn_dim must be a positive integer"),
        (dict(num_encoder_layers=-1), r"num_encoder_layers must be an integer >= 0"),
    ],
)
def test_invalid_values_are_rejected_with_the_choices(changes, message):
    with pytest.raises(ValueError, match=message):
        _cfg(**changes)


def test_divisibility_error_lists_valid_head_counts():
    with pytest.raises(ValueError, match=r"Valid num_heads for this D: \[1, 2, 3, 5, 6, 10"):
        _cfg(model_dim=30, num_heads=4)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(
        ValueError, match=r"Unknown model config key\(s\) \['num_layer'\].*model_dim"
    ):
        ModelConfig.from_dict({"num_layer": 3}, src_vocab_size=5, tgt_vocab_size=5)
    with pytest.raises(ValueError, match="Unknown model config key"):
        _cfg().replace(dropout=0.2)


def test_replace_derives_modes_and_revalidates():
    train = _cfg()
    decode = train.replace(deterministic=True, decode=True)
    assert decode.decode and decode.deterministic and not train.decode
    assert decode.model_dim == train.model_dim
    with pytest.raises(ValueError, match="not divisible"):
        train.replace(num_heads=3)
    with pytest.raises(AttributeError):
        train.model_dim = 64  # frozen


@pytest.mark.parametrize("variant", sorted(model_configs.VARIANTS))
def test_every_named_variant_builds_a_valid_model_config(variant):
    section = model_configs.get_config(variant)
    cfg = ModelConfig.from_dict(section.to_dict(), src_vocab_size=100, tgt_vocab_size=100)
    assert cfg.model_dim % cfg.num_heads == 0


def test_book_and_paper_variants_hold_their_published_settings():
    d2l = model_configs.get_config("d2l")
    assert (
        d2l.num_encoder_layers,
        d2l.num_decoder_layers,
        d2l.model_dim,
        d2l.num_heads,
        d2l.ffn_dim,
        d2l.dropout_rate,
    ) == (2, 2, 32, 4, 64, 0.1)
    base = model_configs.get_config("base")
    assert (
        base.num_encoder_layers,
        base.model_dim,
        base.num_heads,
        base.ffn_dim,
        base.dropout_rate,
    ) == (6, 512, 8, 2048, 0.1)
    big = model_configs.get_config("big")
    assert (big.model_dim, big.num_heads, big.ffn_dim, big.dropout_rate) == (1024, 16, 4096, 0.3)
    with pytest.raises(ValueError, match=r"Unknown model variant 'huge'; choose one of"):
        model_configs.get_config("huge")


def test_model_defaults_live_in_model_config_and_variants_list_only_their_changes():
    defaults = ModelConfig.defaults_dict()
    # Every field a run config sets, none that the code sets (vocab sizes, modes, gradients).
    assert set(defaults) == set(field_names()) - {
        "src_vocab_size", "tgt_vocab_size", "deterministic", "decode", "gradients",
    }  # fmt: skip
    built = ModelConfig(src_vocab_size=3, tgt_vocab_size=3)
    assert all(getattr(built, key) == value for key, value in defaults.items())
    for name, sizes in model_configs.VARIANTS.items():
        section = model_configs.get_config(name)
        assert section.to_dict() == {**defaults, **sizes}, name
    assert model_configs.get_config("base").norm_eps == defaults["norm_eps"] == 1e-5
