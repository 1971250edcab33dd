"""Independent float64 numpy references for the ops (written from the formulas, not the code)."""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if mask is None:
        mask = np.ones_like(x, dtype=bool)
    mask = np.broadcast_to(mask, x.shape)
    out = np.zeros_like(x)
    it = np.ndindex(*x.shape[:-1])
    for idx in it:
        row, m = x[idx], mask[idx]
        if not m.any():
            continue
        e = np.exp(row[m] - row[m].max())
        out[idx][m] = e / e.sum()
    return out


def dot_attention(q, k, v, mask=None):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    w = softmax(scores, mask)
    return w @ v, w


def additive_scores(qf, kf, w_v):
    qf, kf, w_v = (np.asarray(a, np.float64) for a in (qf, kf, w_v))
    b, h, t, _ = qf.shape
    s = kf.shape[2]
    out = np.zeros((b, h, t, s))
    for bi, hi, ti, si in np.ndindex(b, h, t, s):
        v = w_v if w_v.ndim == 1 else w_v[hi]
        out[bi, hi, ti, si] = v @ np.tanh(qf[bi, hi, ti] + kf[bi, hi, si])
    return out


def layer_norm(x, scale, bias, eps):
    x = np.asarray(x, np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * scale + bias


def rms_norm(x, scale, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * scale


def ffn(x, w1, b1, w2, b2, activation="relu"):
    from math import erf

    h = np.asarray(x, np.float64) @ w1 + b1
    if activation == "relu":
        h = np.maximum(h, 0)
    else:
        h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    return h @ w2 + b2


def sinusoidal(max_len, dim):
    p = np.zeros((max_len, dim))
    for i in range(max_len):
        for c in range(dim):
            j2 = c - (c % 2)  # the 2j of the formula
            angle = i / 10000 ** (j2 / dim)
            p[i, c] = np.sin(angle) if c % 2 == 0 else np.cos(angle)
    return p


def rel_err(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))
