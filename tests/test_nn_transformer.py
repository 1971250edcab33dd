import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import model as model_configs
from tests.helpers import float32_matmuls
from transformer_jax.nn import CausalLM, DecoderBlock, Encoder, ModelConfig, Transformer
from transformer_jax.testing import tiny_config

# cached against full decoding (other matmul shapes) at 1e-5: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

V_SRC, V_TGT = 40, 50


def _cfg(**kw):
    # The tiny model in training mode (dropout 0.1) unless a test says otherwise.
    base = {"src_vocab_size": V_SRC, "tgt_vocab_size": V_TGT, "deterministic": False}
    return tiny_config(**{**base, "dropout_rate": 0.1, "attention_dropout_rate": 0.1, **kw})


def _batch(seed=0, b=3, s=9, t=7):
    k1, k2 = jax.random.split(jax.random.key(seed))
    src = jax.random.randint(k1, (b, s), 4, V_SRC)
    tgt = jax.random.randint(k2, (b, t), 4, V_TGT)
    src_len = jnp.array([s, 4, 1][:b])
    return src, src_len, tgt


def _init(cfg, batch, seed=0):
    return Transformer(cfg).init(jax.random.key(seed), *batch)["params"]


def _perturb_zero_params(params):
    # ReZero's α starts at 0, which would make every block the identity and hide bugs.
    return jax.tree.map(lambda a: a + 0.5 if a.ndim == 0 else a, params)


def test_book_encoder_shape_example():
    # d2l §11.7.4: 2 layers, D 24, H 8, F 48, vocab 200: (2, 100) ids -> (2, 100, 24).
    cfg = ModelConfig(
        src_vocab_size=200,
        tgt_vocab_size=200,
        model_dim=24,
        num_heads=8,
        ffn_dim=48,
        num_encoder_layers=2,
        dropout_rate=0.5,
        deterministic=True,
    )
    tokens, lens = jnp.ones((2, 100), jnp.int32), jnp.array([3, 2])
    out, _ = Encoder(cfg).init_with_output(jax.random.key(0), tokens, lens)
    assert out.shape == (2, 100, 24)
    # d2l §11.7.5: a decoder block maps (2, 100, 24) with the encoder output to (2, 100, 24).
    x = jnp.ones((2, 100, 24))
    y, _ = DecoderBlock(cfg).init_with_output(jax.random.key(0), x, None, out, None)
    assert y.shape == (2, 100, 24)


def test_transformer_logits_shape_and_dtype():
    batch = _batch()
    cfg = _cfg(deterministic=True)
    logits = Transformer(cfg).apply({"params": _init(cfg, batch)}, *batch)
    assert logits.shape == (3, 7, V_TGT) and logits.dtype == jnp.float32


@pytest.mark.parametrize("placement", ["post", "pre", "rezero"])
def test_causality_later_target_tokens_do_not_change_earlier_outputs(placement):
    cfg = _cfg(deterministic=True, norm_placement=placement)
    src, src_len, tgt = _batch(1)
    params = _perturb_zero_params(_init(cfg, (src, src_len, tgt)))
    model = Transformer(cfg)
    base = model.apply({"params": params}, src, src_len, tgt)
    changed = model.apply({"params": params}, src, src_len, tgt.at[:, 4].set(5))
    np.testing.assert_allclose(np.asarray(base[:, :4]), np.asarray(changed[:, :4]), atol=1e-6)
    assert np.abs(np.asarray(base[:, 4:] - changed[:, 4:])).max() > 1e-3


@pytest.mark.parametrize("attention_kind", ["dot", "additive"])
def test_padding_invariance_source_tokens_past_valid_length(attention_kind):
    cfg = _cfg(deterministic=True, attention_kind=attention_kind)
    src, src_len, tgt = _batch(2)
    params = _init(cfg, (src, src_len, tgt))
    model = Transformer(cfg)
    base = model.apply({"params": params}, src, src_len, tgt)
    positions = jnp.arange(src.shape[1])[None]
    noisy = jnp.where(positions >= src_len[:, None], 7, src)
    assert (noisy != src).any()
    other = model.apply({"params": params}, noisy, src_len, tgt)
    np.testing.assert_allclose(np.asarray(base), np.asarray(other), atol=1e-6)
    # ... while a token inside the valid length does matter.
    inside = model.apply({"params": params}, src.at[0, 0].set(9), src_len, tgt)
    assert np.abs(np.asarray(inside[0] - base[0])).max() > 1e-4


def _cached_logits(cfg, params, src, src_len, tgt):
    model = Transformer(cfg)
    memory = model.apply({"params": params}, src, src_len, method="encode")
    decoder = Transformer(cfg.replace(decode=True))
    cache = decoder.init(jax.random.key(0), src, src_len, jnp.zeros_like(tgt))["cache"]
    step = jax.jit(
        lambda c, tok: decoder.apply(
            {"params": params, "cache": c}, memory, src_len, tok, method="decode", mutable=["cache"]
        )
    )
    outs = []
    for t in range(tgt.shape[1]):
        logits, mutated = step(cache, tgt[:, t : t + 1])
        cache = mutated["cache"]
        outs.append(logits)
    return jnp.concatenate(outs, axis=1)


# Each option at least once, one layer per stack (compiles fast), plus the default with two
# layers (so a layer reads another layer's cached output).
CACHE_CASES = [
    ("post", "dot", "sinusoidal", 2),
    ("pre", "dot", "sinusoidal", 1),
    ("rezero", "dot", "sinusoidal", 1),
    ("post", "additive", "sinusoidal", 1),
    ("pre", "additive", "learned", 1),
    ("rezero", "dot", "learned", 1),
]


@pytest.mark.parametrize("placement,attention_kind,positional,layers", CACHE_CASES)
def test_cached_decoding_equals_full_parallel_decoder(
    placement, attention_kind, positional, layers
):
    cfg = _cfg(
        deterministic=True,
        norm_placement=placement,
        attention_kind=attention_kind,
        positional=positional,
        max_len=16,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
    )
    src, src_len, tgt = _batch(3)
    params = _perturb_zero_params(_init(cfg, (src, src_len, tgt)))
    full = Transformer(cfg).apply({"params": params}, src, src_len, tgt)
    stepwise = _cached_logits(cfg, params, src, src_len, tgt)
    np.testing.assert_allclose(np.asarray(stepwise), np.asarray(full), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("placement,attention_kind,positional,layers", CACHE_CASES)
def test_forward_and_backward_with_dropout_have_no_nan(
    placement, attention_kind, positional, layers
):
    cfg = _cfg(
        norm_placement=placement,
        attention_kind=attention_kind,
        positional=positional,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
    )
    src, src_len, tgt = _batch(4)
    params = _init(cfg, (src, src_len, tgt))
    model = Transformer(cfg)

    def loss(p):
        logits = model.apply({"params": p}, src, src_len, tgt, rngs={"dropout": jax.random.key(1)})
        return -jnp.mean(jax.nn.log_softmax(logits)[..., 0])

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    assert np.isfinite(float(value))
    leaves = jax.tree.leaves(grads)
    assert all(np.isfinite(np.asarray(g)).all() for g in leaves)
    assert sum(float(jnp.abs(g).sum()) for g in leaves) > 0
    if placement == "rezero":
        alphas = [
            g
            for path, g in jax.tree_util.tree_leaves_with_path(grads)
            if "alpha" in jax.tree_util.keystr(path)
        ]
        assert alphas and any(float(jnp.abs(a)) > 0 for a in alphas)


def test_pre_norm_has_final_norms_and_post_norm_does_not():
    batch = _batch()
    pre = _init(_cfg(norm_placement="pre"), batch)
    post = _init(_cfg(norm_placement="post"), batch)
    assert "final_norm" in pre["encoder"] and "final_norm" in pre["decoder"]
    assert "final_norm" not in post["encoder"] and "final_norm" not in post["decoder"]
    rezero = _init(_cfg(norm_placement="rezero"), batch)
    assert "norm" not in rezero["encoder"]["block_0"]["ffn_residual"]


def test_shared_embeddings_and_tied_output():
    batch = _batch()
    cfg = _cfg(src_vocab_size=V_TGT, share_embeddings=True, tie_output=True, deterministic=True)
    src, src_len, tgt = batch
    params = Transformer(cfg).init(jax.random.key(0), src, src_len, tgt)["params"]
    assert "src_embed" in params and "tgt_embed" not in params and "output" not in params
    # Tied logits are the decoder output times the embedding matrix: moving the table moves them.
    model = Transformer(cfg)
    a = model.apply({"params": params}, src, src_len, tgt)
    bumped = jax.tree.map(lambda x: x, params)
    bumped["src_embed"]["embedding"] = params["src_embed"]["embedding"] * 1.5
    b = model.apply({"params": bumped}, src, src_len, tgt)
    assert np.abs(np.asarray(a - b)).max() > 1e-3
    with pytest.raises(ValueError, match="share_embeddings=True needs one vocabulary"):
        _cfg(share_embeddings=True)


def test_bfloat16_compute_keeps_float32_params_and_close_logits():
    batch = _batch()
    cfg = _cfg(deterministic=True)
    params = _init(cfg.replace(dtype="bfloat16"), batch)
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))
    f32 = Transformer(cfg).apply({"params": params}, *batch)
    bf16 = Transformer(cfg.replace(dtype="bfloat16")).apply({"params": params}, *batch)
    assert bf16.dtype == jnp.float32
    assert np.abs(np.asarray(f32 - bf16)).max() < 0.1 * np.abs(np.asarray(f32)).max()


@pytest.mark.parametrize("gradients", ["custom_vjp", "autodiff"])
def test_bfloat16_gradients_are_close_to_float32(gradients):
    # bf16 matmuls accumulate in float32 (ops.einsum), under either derivative rule; the
    # gradients must still be the model's.
    src, src_len, tgt = _batch()
    cfg = _cfg(deterministic=True, gradients=gradients)
    params = _init(cfg, (src, src_len, tgt))

    def loss(p, dtype):
        logits = Transformer(cfg.replace(dtype=dtype)).apply({"params": p}, src, src_len, tgt)
        return -jnp.mean(jax.nn.log_softmax(logits)[..., 5])

    g32 = jax.grad(loss)(params, "float32")
    g16 = jax.grad(loss)(params, "bfloat16")
    # Against the largest gradient: some leaves (the key bias) have a true gradient of 0.
    scale = max(np.abs(np.asarray(a)).max() for a in jax.tree.leaves(g32))
    for a, b in zip(jax.tree.leaves(g32), jax.tree.leaves(g16), strict=True):
        assert b.dtype == jnp.float32
        assert np.abs(np.asarray(a) - np.asarray(b)).max() <= 0.02 * scale


def test_remat_changes_neither_parameters_nor_gradients():
    batch = _batch()
    cfg = _cfg(dropout_rate=0.1)
    params = _init(cfg, batch)
    assert jax.tree.structure(_init(cfg.replace(remat=True), batch)) == jax.tree.structure(params)

    def loss(p, remat):
        model = Transformer(cfg.replace(remat=remat))
        logits = model.apply({"params": p}, *batch, rngs={"dropout": jax.random.key(1)})
        return jnp.mean(logits**2)

    grads = jax.grad(loss)(params, False)
    remat_grads = jax.grad(loss)(params, True)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(remat_grads), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda p: loss(p, True)))(params))
    assert "remat" in jaxpr or "checkpoint" in jaxpr


def test_decoder_only_causal_lm_is_causal():
    cfg = _cfg(deterministic=True, num_encoder_layers=0)
    tokens = jax.random.randint(jax.random.key(0), (2, 8), 4, V_TGT)
    lm = CausalLM(cfg)
    params = lm.init(jax.random.key(0), tokens)["params"]
    assert "cross_attention" not in params["decoder"]["block_0"]
    a = lm.apply({"params": params}, tokens)
    b = lm.apply({"params": params}, tokens.at[:, 5].set(3))
    assert a.shape == (2, 8, V_TGT)
    np.testing.assert_allclose(np.asarray(a[:, :5]), np.asarray(b[:, :5]), atol=1e-6)


def test_too_long_sequence_for_learned_positions_names_the_limit():
    cfg = _cfg(max_len=8, deterministic=True, positional="learned")
    src, src_len, tgt = _batch(s=9)
    with pytest.raises(ValueError, match=r"learned position table \(model.max_len=8\)"):
        Transformer(cfg).init(jax.random.key(0), src, src_len, tgt)


def test_sinusoidal_positions_have_no_length_limit():
    """max_len does not limit a sinusoidal model: a 9-token source with max_len 8 encodes."""
    cfg = _cfg(max_len=8, deterministic=True)
    src, src_len, tgt = _batch(s=9)
    params = Transformer(cfg).init(jax.random.key(0), src, src_len, tgt)["params"]
    logits = Transformer(cfg).apply({"params": params}, src, src_len, tgt)
    assert np.isfinite(np.asarray(logits)).all()


def test_base_variant_parameter_count_matches_paper_order_of_magnitude():
    # Vaswani et al. 2017, Table 3: Transformer-base has 65M parameters with a shared
    # ~37k BPE vocabulary (shared source/target embeddings, tied output projection).
    section = model_configs.get_config("base").to_dict()
    cfg = ModelConfig.from_dict(
        section, src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True, tie_output=True
    )
    shapes = jax.eval_shape(
        lambda: Transformer(cfg).init(
            jax.random.key(0),
            jnp.ones((1, 8), jnp.int32),
            jnp.ones((1,), jnp.int32),
            jnp.ones((1, 8), jnp.int32),
        )
    )["params"]
    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    print(f"Transformer-base parameters (shared 37k vocab, tied output): {count:,}")
    assert 60e6 < count < 66e6
