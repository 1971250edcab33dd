"""PNG pictures: attention heatmaps (d2l `show_heatmaps`) and training curves.

Everything here draws with matplotlib's non-interactive Agg backend and writes files, so it
works on headless machines and in tests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _draw_grid(
    fig_or_subfig: Any,
    matrices: np.ndarray,
    *,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None,
    row_titles: Sequence[str] | None,
    xticklabels: Sequence[str] | None,
    yticklabels: Sequence[str] | None,
    cmap: str,
) -> Any:
    """One grid of heatmaps (R, C, Q, K) on a figure or subfigure; returns the axes (R, C)."""
    rows, cols = matrices.shape[:2]
    axes = fig_or_subfig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    image = None
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            image = ax.imshow(matrices[r, c], cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
            if xticklabels is not None:
                ax.set_xticks(range(len(xticklabels)))
                ax.set_xticklabels(xticklabels, rotation=90, fontsize=9)
            if yticklabels is not None:
                ax.set_yticks(range(len(yticklabels)))
                ax.set_yticklabels(yticklabels, fontsize=9)
            if r == rows - 1:
                ax.set_xlabel(xlabel)
            if c == 0:
                label = ylabel if row_titles is None else f"{row_titles[r]}\n{ylabel}"
                ax.set_ylabel(label)
            if titles is not None and r == 0:
                ax.set_title(titles[c])
    if image is not None:
        fig_or_subfig.colorbar(image, ax=axes, shrink=0.6)
    return axes


def show_heatmaps(
    matrices: np.ndarray,
    xlabel: str,
    ylabel: str,
    path: str | Path,
    *,
    titles: Sequence[str] | None = None,
    row_titles: Sequence[str] | None = None,
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
    figsize: tuple[float, float] = (2.5, 2.5),
    cmap: str = "Reds",
) -> Path:
    """Save a grid of heatmaps, like d2l's `show_heatmaps` (§10.1), as a PNG.

    Args:
      matrices: (R, C, Q, K), e.g. (layers, heads, queries, keys) attention weights.
      xlabel, ylabel: axis labels (keys, queries).
      path: the PNG to write.
      titles: C column titles; row_titles: R row names (e.g. "layer 1").
      figsize: size of one heatmap in inches.

    Returns:
      The path written.
    """
    matrices = np.asarray(matrices)
    if matrices.ndim != 4 or 0 in matrices.shape:
        raise ValueError(f"matrices must be a non-empty (R, C, Q, K) array, got {matrices.shape}.")
    rows, cols = matrices.shape[:2]
    fig = plt.figure(figsize=(figsize[0] * cols + 1.0, figsize[1] * rows), layout="constrained")
    _draw_grid(
        fig,
        matrices,
        xlabel=xlabel,
        ylabel=ylabel,
        titles=titles,
        row_titles=row_titles,
        xticklabels=xticklabels,
        yticklabels=yticklabels,
        cmap=cmap,
    )
    return _save(fig, path)


def plot_attention(maps: Any, path: str | Path, *, cell: float = 2.6) -> Path:
    """One PNG with the three attention kinds of a sentence pair, each layers × heads.

    `maps` is an `inference.attention_maps.AttentionMaps` (weights already trimmed to real
    tokens): encoder self-attention (source × source), decoder self-attention (target ×
    target) and encoder–decoder attention (target queries × source keys).
    """
    panels = [
        ("Encoder self-attention", maps.encoder_self, maps.src_tokens, maps.src_tokens, "Keys"),
        ("Decoder self-attention", maps.decoder_self, maps.tgt_tokens, maps.tgt_tokens, "Keys"),
        ("Encoder–decoder attention", maps.cross, maps.src_tokens, maps.tgt_tokens, "Source"),
    ]
    panels = [p for p in panels if np.asarray(p[1]).size]
    if not panels:
        raise ValueError("no attention weights to plot.")
    heads = max(np.asarray(p[1]).shape[1] for p in panels)
    heights = [np.asarray(p[1]).shape[0] for p in panels]
    fig = plt.figure(
        figsize=(cell * heads + 1.5, cell * sum(heights) + 0.6 * len(panels)), layout="constrained"
    )
    subfigs = fig.subfigures(len(panels), 1, height_ratios=heights, squeeze=False)[:, 0]
    for subfig, (title, weights, xt, yt, xlabel) in zip(subfigs, panels, strict=True):
        weights = np.asarray(weights)
        subfig.suptitle(title)
        _draw_grid(
            subfig,
            weights,
            xlabel=xlabel,
            ylabel="Queries",
            titles=[f"Head {h + 1}" for h in range(weights.shape[1])],
            row_titles=[f"Layer {i + 1}" for i in range(weights.shape[0])],
            xticklabels=xt,
            yticklabels=yt,
            cmap="Reds",
        )
    return _save(fig, path)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSONL metrics log (one JSON object per line; blank lines skipped)."""
    records = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n} is not JSON ({e}).") from e
    return records


def _series(records: Iterable[Mapping[str, Any]], step_key: str) -> dict[str, tuple[list, list]]:
    """{metric: (steps, values)} for every finite numeric field of records with a step.

    Records with a "split" (the training metrics log writes "train" / "eval") name their
    series "<split>/<field>", so train and eval curves of one field stay apart.
    """
    out: dict[str, tuple[list, list]] = {}
    for rec in records:
        if step_key not in rec:
            continue
        split = rec.get("split")
        for key, value in rec.items():
            if key == step_key or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not math.isfinite(value):
                continue
            name = f"{split}/{key}" if isinstance(split, str) else key
            steps, values = out.setdefault(name, ([], []))
            steps.append(rec[step_key])
            values.append(value)
    return out


def plot_training_curves(
    metrics: str | Path | Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    step_key: str = "step",
) -> Path:
    """Loss and BLEU/chrF against step from a metrics log (JSONL path or list of records).

    Every numeric field whose name contains "loss" or "nll" goes on the left panel, every
    field with "bleu" or "chrf" on the right one (panels without data are left out).
    """
    records = read_metrics(metrics) if isinstance(metrics, str | Path) else list(metrics)
    series = _series(records, step_key)
    groups = [
        ("Loss", [k for k in series if "loss" in k.lower() or "nll" in k.lower()]),
        ("BLEU / chrF", [k for k in series if "bleu" in k.lower() or "chrf" in k.lower()]),
    ]
    groups = [(title, keys) for title, keys in groups if keys]
    if not groups:
        raise ValueError(
            f"no loss or BLEU fields with a {step_key!r} in the metrics; fields seen: "
            f"{sorted(series)}."
        )
    fig, axes = plt.subplots(
        1, len(groups), figsize=(5.0 * len(groups), 3.6), squeeze=False, layout="constrained"
    )
    for ax, (title, keys) in zip(axes[0], groups, strict=True):
        for key in sorted(keys):
            steps, values = series[key]
            ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=key)
        ax.set_xlabel(step_key)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
