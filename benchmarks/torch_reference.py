"""The same Transformer in `torch.nn.Transformer`, for side-by-side speed tables (optional).

Embeddings scaled by √D plus a sinusoidal table, torch.nn.Transformer (post-norm, ReLU,
dropout 0.1, batch_first), an output projection, Adam, cross-entropy ignoring padding.
Only imported when torch is installed (`pip install torch==2.13.0`). On the CPU by default;
`benchmarks.accelerator_check` runs it on CUDA with fused Adam.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from benchmarks.common import Setting


class TorchSeq2Seq(nn.Module):
    def __init__(self, s: Setting, dropout: float = 0.1):
        super().__init__()
        self.d = s.model_dim
        self.src_embed = nn.Embedding(s.vocab, s.model_dim)
        self.tgt_embed = nn.Embedding(s.vocab, s.model_dim)
        pos = np.arange(1024)[:, None] / np.power(10000, np.arange(0, s.model_dim, 2) / s.model_dim)
        table = np.zeros((1024, s.model_dim), np.float32)
        table[:, 0::2], table[:, 1::2] = np.sin(pos), np.cos(pos)
        self.register_buffer("pos", torch.from_numpy(table))
        self.dropout = nn.Dropout(dropout)
        self.transformer = nn.Transformer(
            s.model_dim, s.num_heads, s.layers, s.layers, s.ffn_dim, dropout, batch_first=True
        )
        self.out = nn.Linear(s.model_dim, s.vocab)

    def embed(self, table: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        x = table(tokens) * math.sqrt(self.d) + self.pos[: tokens.shape[1]]
        return self.dropout(x)

    def forward(self, src, src_pad, tgt_in) -> torch.Tensor:
        t = tgt_in.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(t, device=tgt_in.device)
        h = self.transformer(
            self.embed(self.src_embed, src),
            self.embed(self.tgt_embed, tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return self.out(h)


def make_train_step(
    s: Setting, compile: bool = False, bf16: bool = False, device: str = "cpu", fused: bool = False
):
    """A closure running one Adam step on a batch: `step(batch)` returns the loss as a float
    (synchronously), `step(batch, sync=False)` the loss tensor without waiting for the device.
    A batch is numpy arrays (copied to `device` in the step) or `to_device`'s tensors.

    `bf16` runs forward and loss under `torch.autocast(<device type>, torch.bfloat16)`,
    PyTorch's mixed precision: float32 parameters and optimizer, bfloat16 matmuls (oneDNN on
    the CPU). `device` is where the model and each batch go ("cuda" on a GPU); `fused` takes
    `torch.optim.Adam(..., fused=True)`, one kernel for the whole update.
    """
    torch.manual_seed(0)
    model = TorchSeq2Seq(s).to(device)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=fused or None)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)
    forward = torch.compile(model) if compile else model
    device_type = torch.device(device).type

    def step(batch, sync: bool = True):
        src, tgt_in, tgt_out = (_on(batch[k], device) for k in ("src", "tgt_in", "tgt_out"))
        src_pad = src == 0
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
            logits = forward(src, src_pad, tgt_in)
            loss = loss_fn(logits.float().reshape(-1, s.vocab), tgt_out.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item() if sync else loss.detach()

    return step, model


def to_device(batch: dict[str, np.ndarray], device: str) -> dict[str, torch.Tensor]:
    """A numpy batch's token arrays as int64 tensors on `device`, for `step` to take as they
    are: no copy (and, on a GPU, no wait for the device) inside the step."""
    return {k: _on(batch[k], device) for k in ("src", "tgt_in", "tgt_out")}


def _on(x: np.ndarray | torch.Tensor, device: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    return torch.from_numpy(np.asarray(x)).long().to(device)


def greedy_recompute(model: TorchSeq2Seq, src: torch.Tensor, max_len: int) -> torch.Tensor:
    """Greedy decoding by full recomputation over the prefix (no cache), as in d2l."""
    model.eval()
    with torch.no_grad():
        src_pad = src == 0
        tokens = torch.ones((src.shape[0], 1), dtype=torch.long)  # <bos>
        for _ in range(max_len):
            logits = model(src, src_pad, tokens)
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens[:, 1:]
