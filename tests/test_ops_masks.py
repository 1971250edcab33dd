import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax import ops


def test_valid_length_per_sequence():
    m = np.asarray(ops.valid_length_mask(jnp.array([2, 0, 4]), 4))
    assert m.shape == (3, 1, 1, 4)
    expected = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], bool)
    np.testing.assert_array_equal(m[:, 0, 0], expected)


def test_valid_length_per_query_is_causal_for_book_rows():
    # d2l's decoder training form: dec_valid_lens = [1, 2, ..., T] for every sequence.
    t = 5
    lens = jnp.tile(jnp.arange(1, t + 1), (2, 1))  # (B, T)
    m = np.asarray(ops.valid_length_mask(lens, t))
    assert m.shape == (2, 1, t, t)
    np.testing.assert_array_equal(m[0, 0], np.tril(np.ones((t, t), bool)))
    np.testing.assert_array_equal(m[0, 0], np.asarray(ops.causal_mask(t))[0, 0])


def test_valid_length_bad_rank():
    with pytest.raises(ValueError, match="valid_lens must have shape"):
        ops.valid_length_mask(jnp.zeros((1, 2, 3), jnp.int32), 3)


def test_causal_mask_with_offset():
    m = np.asarray(ops.causal_mask(2, 6, offset=3))[0, 0]
    np.testing.assert_array_equal(m, np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]], bool))


def test_padding_mask_and_combination():
    tokens = jnp.array([[5, 6, 0, 0], [7, 0, 0, 0]])
    pad = ops.padding_mask(tokens, pad_id=0)
    assert pad.shape == (2, 1, 1, 4)
    both = np.asarray(ops.combine_masks(pad, ops.causal_mask(4), None))
    assert both.shape == (2, 1, 4, 4)
    expected0 = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]], bool)
    np.testing.assert_array_equal(both[0, 0], expected0)
    assert ops.combine_masks(None, None) is None
