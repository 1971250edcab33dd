"""A traced step's device time by kind of kernel, and the MFU its matmuls alone would allow.

    rows = profile_step.op_table(trace_dir, steps)           # ours: (op kind, ms, calls)
    rows = torch_rows(impl.call, steps=2)                     # torch: (kernel, ms, calls)
    summary(rows, flops=flops_per_step, peak=peak_flops)
    # {"ms_per_step": {"matmul": 31.2, "attention": 0.0, "other": 19.5}, "total_ms": 50.7,
    #  "matmul_share": 0.62, "mfu_if_only_matmuls": 0.41, "top": [...]}

"mfu_if_only_matmuls" is the step's model FLOPs over the time of its matmul (and fused
attention) kernels alone, against the measured matmul peak: the MFU the step would reach
if every other kernel (norms, softmax, dropout, the loss, the optimizer) took no time. It
bounds what fusing the rest away can give with those matmul kernels: an MFU target above
it needs faster matmuls for these shapes, not less overhead.

Kernels are told apart by name, as XLA:GPU names its ops ("cublas-gemm", "gemm_fusion",
"triton_gemm", "dot") and NVIDIA's libraries their kernels ("nvjet", "sm90_xmma_gemm",
"cutlass", torch.compile's "triton_tem_fused_mm"), fused attention by "flash"/"fmha"/
"attention". On a CPU trace (the dry run) the names are XLA:CPU's ("ynn_fusion": a dot run
by YNNPACK, its default fusion) or aten's, and the split is only indicative.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# A name is a matmul when one of these occurs in it (case-insensitive); "mm" and "dot" only
# as whole words or between underscores ("aten::mm", "triton_tem_fused_mm_0", "dot.12"),
# not inside other words ("comm", "dots").
MATMUL = re.compile(
    r"gemm|nvjet|xmma|cutlass|cublas|matmul|addmm|bmm|baddbmm|ynn_fusion"
    r"|(?:^|[^a-z])(?:mm|dot)(?:[^a-z]|$)",
    re.IGNORECASE,
)
ATTENTION = re.compile(r"flash|fmha|attention|sdpa", re.IGNORECASE)
GROUPS = ("matmul", "attention", "other")

Row = tuple[str, float, int]  # (name, ms per step, calls per step)


def classify(name: str) -> str:
    """ "attention", "matmul" or "other" for a kernel or op name."""
    if ATTENTION.search(name):
        return "attention"
    return "matmul" if MATMUL.search(name) else "other"


def summary(rows: list[Row], *, flops: float, peak: float | None, top: int = 25) -> dict[str, Any]:
    """Milliseconds per step by group, the matmul share, and `mfu_if_only_matmuls` (module
    doc; None without a peak or matmul time), with the `top` rows and their groups."""
    ms = dict.fromkeys(GROUPS, 0.0)
    for name, t, _ in rows:
        ms[classify(name)] += t
    total = sum(ms.values())
    busy = ms["matmul"] + ms["attention"]
    return {
        "ms_per_step": {k: round(v, 3) for k, v in ms.items()},
        "total_ms": round(total, 3),
        "matmul_share": round(busy / total, 4) if total else None,
        "mfu_if_only_matmuls": flops / (busy / 1e3) / peak if busy and peak else None,
        "top": [[name, round(t, 3), n, classify(name)] for name, t, n in rows[:top]],
    }


def torch_rows(call: Callable[[], None], steps: int) -> list[Row]:
    """(kernel, ms per step, calls per step) of `steps` calls under `torch.profiler`, largest
    first: the CUDA kernels' own device time on a GPU, the ops' own CPU time without one."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            call()
    rows = []
    for event in prof.key_averages():
        if cuda:
            us = getattr(event, "self_device_time_total", None)
            us = getattr(event, "self_cuda_time_total", 0) if us is None else us
        else:
            us = event.self_cpu_time_total
        if us > 0:
            rows.append((event.key, us / steps / 1e3, event.count // steps))
    return sorted(rows, key=lambda row: -row[1])
