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

Names miss the GEMMs XLA:GPU emits itself: a Triton GEMM nested in a larger fusion, or one
XLA named after its epilogue, runs as a kernel named after the fusion ("fusion_4706").
Given the step's optimised HLO (`compiled.as_text()`), `matmul_fusions` names every fusion
whose computation holds a dot or convolution, directly or in a fusion nested in it, and
`summary(..., matmul_names=...)` counts their kernels as matmuls. Without it, the first H200
profile of `base` put 5.9 ms a step of such kernels under "other" while its named matmul
kernels alone would have run the step's FLOPs at 100.5 % of the peak: the bound was wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
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


def classify(name: str, matmul_names: Collection[str] = ()) -> str:
    """ "attention", "matmul" or "other" for a kernel or op name; `matmul_names` (from
    `matmul_fusions`) are matmuls whatever their name says."""
    if ATTENTION.search(name):
        return "attention"
    if name in matmul_names or MATMUL.search(name):
        return "matmul"
    return "other"


# An optimised HLO module's text: computation headers ("%fused_computation.12 (p: ...) ->
# ... {", "ENTRY %main ... {"), their instructions, a closing "}".
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\))?\s*(?:->.*)?\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_FUSION_CALL = re.compile(r"\bfusion\(.*\bcalls=%?([\w.\-]+)")
_DOT = re.compile(r"\s(?:dot|convolution)\(|custom_call_target=\"__cublas")


def kernel_name(hlo_name: str) -> str:
    """An HLO instruction's kernel name as XLA:GPU launches it ("fusion.12" -> "fusion_12")."""
    return re.sub(r"[.\-]", "_", hlo_name)


def matmul_fusions(hlo_text: str) -> frozenset[str]:
    """Kernel names of the fusions in an optimised HLO module whose computation holds a dot
    or convolution (or a cuBLAS call), directly or in a fusion it calls, however deep."""
    has_dot: dict[str, bool] = {}
    calls: dict[str, set[str]] = {}
    fusions: dict[str, str] = {}  # fusion instruction -> the computation it calls
    current = None
    for line in hlo_text.splitlines():
        if current is None:
            header = _HEADER.match(line)
            if header:
                current = header.group(1)
                has_dot[current], calls[current] = False, set()
            continue
        if line.startswith("}"):
            current = None
            continue
        instruction = _INSTRUCTION.match(line)
        if not instruction:
            continue
        name, rest = instruction.groups()
        if _DOT.search(" " + rest):
            has_dot[current] = True
        called = _FUSION_CALL.search(rest)
        if called:
            calls[current].add(called.group(1))
            fusions[name] = called.group(1)

    def holds_dot(computation: str, seen: frozenset[str] = frozenset()) -> bool:
        if has_dot.get(computation):
            return True
        inner = calls.get(computation, set()) - seen
        return any(holds_dot(c, seen | {computation}) for c in inner)

    return frozenset(kernel_name(f) for f, c in fusions.items() if holds_dot(c))


def summary(
    rows: list[Row],
    *,
    flops: float,
    peak: float | None,
    top: int = 25,
    matmul_names: Collection[str] = (),
) -> dict[str, Any]:
    """Milliseconds per step by group, the matmul share, and `mfu_if_only_matmuls` (module
    doc; None without a peak or matmul time), with the `top` rows and their groups. Kernels
    named in `matmul_names` (`matmul_fusions` of the step's HLO) count as matmuls."""
    ms = dict.fromkeys(GROUPS, 0.0)
    for name, t, _ in rows:
        ms[classify(name, matmul_names)] += t
    total = sum(ms.values())
    busy = ms["matmul"] + ms["attention"]
    return {
        "ms_per_step": {k: round(v, 3) for k, v in ms.items()},
        "total_ms": round(total, 3),
        "matmul_share": round(busy / total, 4) if total else None,
        "mfu_if_only_matmuls": flops / (busy / 1e3) / peak if busy and peak else None,
        "top": [[name, round(t, 3), n, classify(name, matmul_names)] for name, t, n in rows[:top]],
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
