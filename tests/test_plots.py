"""Heatmaps and training curves are written as PNGs with the right grid layout."""

import json

import matplotlib.image
import numpy as np
import pytest

from transformer_jax.evaluation import (
    AttentionMaps,
    plot_attention,
    plot_training_curves,
    show_heatmaps,
)


def png_shape(path):
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(path).shape[:2]  # (height, width) in pixels


def attention(rows, heads, q, k, seed=0):
    w = np.random.default_rng(seed).random((rows, heads, q, k))
    return w / w.sum(-1, keepdims=True)


def test_show_heatmaps_grid_size_follows_rows_and_columns(tmp_path):
    one = png_shape(show_heatmaps(attention(1, 1, 3, 4), "Keys", "Queries", tmp_path / "a.png"))
    grid = png_shape(
        show_heatmaps(
            attention(2, 4, 3, 4),
            "Keys",
            "Queries",
            tmp_path / "b.png",
            titles=[f"Head {i}" for i in range(4)],
            xticklabels=list("abcd"),
            yticklabels=list("xyz"),
        )
    )
    # 2.5 in per cell at 100 dpi (+1 in for the colour bar): 2 rows, 4 columns.
    assert grid == (500, 1100)
    assert one == (250, 350)


def test_show_heatmaps_rejects_wrong_rank(tmp_path):
    with pytest.raises(ValueError, match=r"\(R, C, Q, K\)"):
        show_heatmaps(np.zeros((3, 4)), "k", "q", tmp_path / "x.png")


def test_plot_attention_stacks_three_kinds_layers_by_heads(tmp_path):
    maps = AttentionMaps(
        src_tokens=["i", "lost", ".", "<eos>"],
        tgt_tokens=["<bos>", "j'ai", "perdu", "."],
        encoder_self=attention(2, 4, 4, 4),
        decoder_self=attention(2, 4, 4, 4, seed=1),
        cross=attention(2, 4, 4, 4, seed=2),
    )
    h, w = png_shape(plot_attention(maps, tmp_path / "att.png"))
    # 4 heads across, 3 kinds × 2 layers down (2.6 in per cell, 100 dpi).
    assert w == round(100 * (2.6 * 4 + 1.5))
    assert h == round(100 * (2.6 * 6 + 0.6 * 3))
    image = matplotlib.image.imread(tmp_path / "att.png")
    assert image[..., :3].std() > 0.05  # not a blank canvas


def test_training_curves_from_jsonl(tmp_path):
    log = tmp_path / "metrics.jsonl"
    lines = [
        {"step": s, "train_loss": 5.0 / (1 + s), "eval_loss": 5.5 / (1 + s)} for s in range(10)
    ]
    lines += [{"step": s, "bleu": 2.0 * s, "chrf": 3.0 * s} for s in (0, 5, 9)]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    h, w = png_shape(plot_training_curves(log, tmp_path / "curves.png"))
    assert (h, w) == (360, 1000)  # two panels: loss, BLEU / chrF
    only_loss = [x for x in lines if "train_loss" in x]
    assert png_shape(plot_training_curves(only_loss, tmp_path / "loss.png")) == (360, 500)


def test_training_curves_need_a_loss_or_bleu(tmp_path):
    with pytest.raises(ValueError, match="fields seen: \\['lr'\\]"):
        plot_training_curves([{"step": 1, "lr": 0.1}], tmp_path / "x.png")
