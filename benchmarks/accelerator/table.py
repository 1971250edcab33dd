"""The accelerator check's one table, made from its JSON report.

Rows are (stage, what, result, target); a value that was not measured shows its reason.
Every program a run compiled is in the JSON; the table lists the train-step, eval and
decode programs one by one, the init and other programs as a count and their seconds.
"""

from __future__ import annotations

from typing import Any

Row = tuple[str, str, str, str]

# Issue 38's targets on one H100, printed beside the numbers they apply to.
TARGET_COMPILE_RATIO = 1.2  # our README train step's compile / Flax WMT's, same size
TARGET_CACHE_RATIO = 0.25  # the second README launch's compile seconds / the first's
TARGET_README_S = 120.0  # the README run, report included, data already built
TARGET_DEEP_S, TARGET_DEEP_BLEU = 300.0, 45.0  # deep_sampled, data included
TARGET_VS_EAGER, TARGET_VS_COMPILE, TARGET_MFU = 1.2, 1.0, 0.45  # base, bfloat16

RUNS = {
    "readme": "README run",
    "readme_cached": "README run again",
    "readme_inline": "README run, precompile off",
    "deep_sampled": "deep_sampled run",
}


def _why(value: Any) -> str | None:
    """A value's "not measured: ..." reason, or None for a measured value."""
    return value if isinstance(value, str) else None


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def _flops(x: float) -> str:
    return f"{x / 1e12:.3g} TFLOP" if x >= 1e11 else f"{x / 1e9:.3g} GFLOP"


def programs_rows(stage: dict) -> list[Row]:
    rows: list[Row] = []
    for run, label in RUNS.items():
        log = stage[run]
        if _why(log):
            rows.append(("programs", label, log, ""))
            continue
        kinds = ", ".join(f"{k} {s:.1f}" for k, s in log["seconds_by_kind"].items())
        target = "1 train step, 1 eval, <= 2 decode" if run in ("readme", "deep_sampled") else ""
        ahead = log.get("background_s", 0.0)
        result = (
            f"{log['programs']} programs, {log['seconds']:.1f} s ({kinds}); "
            f"{log['cached']} from the cache"
            + (f"; {ahead:.1f} s of them in a background thread" if ahead else "")
        )
        rows.append(("programs", f"{label}: all", result, target))
        for p in log["table"]:
            if p["kind"] in ("train step", "eval", "decode"):
                cached = " (cache)" if p["cached"] else ""
                cached += " (ahead)" if p.get("background") else ""
                what = f"{label}: {p['kind']} {p['name']}"
                rows.append(("programs", what, f"{p['seconds']:.2f} s{cached}", ""))
    cache, target = stage["cache"], f"<= {100 * TARGET_CACHE_RATIO:.0f} %"
    what = "README run again: compile s / first launch's"
    if _why(cache):
        rows.append(("programs", what, cache, target))
    else:
        result = f"{cache['second_s']:.1f} / {cache['first_s']:.1f} = {100 * cache['ratio']:.0f} %"
        rows.append(("programs", what, result, target))
    compare = stage["compile_vs_flax_wmt"]
    if _why(compare):
        return [*rows, ("programs", "compile: ours / Flax WMT", compare, "")]
    for name, entry in compare["sizes"].items():
        ours, theirs = entry.get("ours", "not measured"), entry.get("flax_wmt", "not measured")
        for kind in ("init", "train step"):
            what = f"{name} {kind} compile: ours / Flax WMT"
            target = f"<= {TARGET_COMPILE_RATIO}x" if kind == "train step" else ""
            a = _why(ours) or f"{ours[kind]['compile_s']:.1f} s"
            b = _why(theirs) or f"{theirs[kind]['compile_s']:.1f} s"
            if not (_why(ours) or _why(theirs)):
                b += f" = {_ratio(ours[kind]['compile_s'], theirs[kind]['compile_s'])}"
            rows.append(("programs", what, f"{a} / {b}", target))
    return rows


def speed_rows(stage: dict) -> list[Row]:
    rows: list[Row] = []
    for key, result in stage.items():
        if _why(result):
            rows.append(("speed", key, result, ""))
            continue
        size = result["size"]
        label = f"{size['name']} {size['dtype']} {size['batch']}"
        if "peak_flops" in result:
            peak = f"{_flops(result['peak_flops'])}/s ({result['peak_note']})"
            rows.append(("speed", "matmul peak", peak, ""))
        if "flops_xla_ours" in result:
            xla = result["flops_xla_ours"]
            flops = f"{_flops(result['flops_per_step'])}; XLA cost_analysis of ours " + (
                _flops(xla) if xla else "n/a"
            )
            rows.append(("speed", f"{size['name']}: FLOPs a step (analytic, for all)", flops, ""))
        for name, entry in result["impls"].items():
            what = f"{label}: {name}"
            if _why(entry):
                rows.append(("speed", what, entry, ""))
            elif "step_ms" not in entry:
                rows.append(
                    ("speed", what, f"first call {entry['first_call_s']:.1f} s, untimed", "")
                )
            else:
                mfu = f", MFU {100 * entry['mfu']:.1f} %" if "mfu" in entry else ""
                target = f"MFU >= {100 * TARGET_MFU:.0f} %" if mfu and "ours" in name else ""
                timing = (
                    f"{entry['tokens_per_s']:,.0f} tok/s, {entry['step_ms']:.2f} ms a step{mfu}; "
                    f"first call {entry['first_call_s']:.1f} s"
                )
                rows.append(("speed", what, timing, target))
                if "pipelined_step_ms" in entry:
                    piped = f"{what}, {entry['pipeline']} a wait"
                    rows.append(("speed", piped, *_piped(entry, target)))
        rows += _ratio_rows(size["name"], result["impls"])
        rows += _ratio_rows(size["name"], result["impls"], pipelined=True)
        for key in ("profile", "profile_torch"):  # ours' trace, then the fastest torch's
            if key in result:
                rows += _profile_rows(size["name"], result[key])
    return rows


def _profile_rows(label: str, profile: dict | str) -> list[Row]:
    """Where an implementation spends a step (the speed worker's traces): the top kernels
    or op kinds, then the matmul time and the MFU the matmuls alone allow."""
    if _why(profile):
        return [("speed", f"{label}: where a step goes", profile, "")]
    top = ", ".join(f"{kind} {ms:.2f} ms ({n})" for kind, ms, n, *_ in profile["top"][:6])
    what = f"{label}: where {profile['impl']}'s step goes (ms a step, calls)"
    rows = [("speed", what, f"ops {profile['total_ms']:.1f} ms: {top}", "")]
    if "ms_per_step" in profile:
        ms, bound = profile["ms_per_step"], profile["mfu_if_only_matmuls"]
        result = (
            f"matmul {ms['matmul']:.1f} ms, fused attention {ms['attention']:.1f}, other "
            f"{ms['other']:.1f}; MFU if only the matmul kernels took time: "
            + ("n/a" if bound is None else f"{100 * bound:.1f} %")
            + (f" (matmuls told by {profile['matmuls_from']})" if "matmuls_from" in profile else "")
        )
        what = f"{label}: {profile['impl']}'s step by kernel kind"
        rows.append(("speed", what, result, f"MFU >= {100 * TARGET_MFU:.0f} % possible?"))
    return rows


def _piped(entry: dict, target: str) -> tuple[str, str]:
    """A pipelined timing's result and target cells (the speed worker's --pipeline)."""
    mfu = f", MFU {100 * entry['pipelined_mfu']:.1f} %" if "pipelined_mfu" in entry else ""
    return (
        f"{entry['pipelined_tokens_per_s']:,.0f} tok/s, {entry['pipelined_step_ms']:.2f} ms a "
        f"step{mfu} (steps launched in a row, as a training loop runs them)",
        target if mfu else "",
    )


def _ratio_rows(label: str, impls: dict, pipelined: bool = False) -> list[Row]:
    """Ours against each peer in tokens/s (and the two gradient rules): synchronised steps,
    or with `pipelined` the --pipeline timings."""
    key = "pipelined_tokens_per_s" if pipelined else "tokens_per_s"
    step = "pipelined_step_ms" if pipelined else "step_ms"
    timed = {n: e for n, e in impls.items() if isinstance(e, dict) and key in e}
    if pipelined and not timed:
        return []
    label = f"{label} (pipelined)" if pipelined else label
    rows = []
    if {"ours (custom_vjp)", "ours (autodiff)"} <= set(timed):
        t, a = timed["ours (custom_vjp)"][step], timed["ours (autodiff)"][step]
        result = f"{t:.2f} / {a:.2f} ms: {'custom_vjp' if t <= a else 'autodiff'} is faster"
        rows.append(
            ("speed", f"{label}: gradients custom_vjp / autodiff", result, "keep the winner")
        )
    ours = [e[key] for n, e in timed.items() if n.startswith("ours (")]
    targets = {"torch eager": TARGET_VS_EAGER, "torch.compile": TARGET_VS_COMPILE}
    for other in ("flax wmt", "torch eager", "torch.compile"):
        if ours and other in timed:
            target = f">= {targets[other]}x" if other in targets else ""
            result = _ratio(max(ours), timed[other][key])
            rows.append(("speed", f"{label}: ours (fastest) / {other}, tok/s", result, target))
    return rows


def end_to_end_rows(stage: dict) -> list[Row]:
    rows: list[Row] = []
    targets = {
        "readme": f"<= {TARGET_README_S:.0f} s",
        "readme_cached": "",
        "readme_inline": "",
        "deep_sampled": f">= {TARGET_DEEP_BLEU:.0f} BLEU in <= {TARGET_DEEP_S:.0f} s",
    }
    for key, label in RUNS.items():
        run = stage[key]
        if _why(run):
            rows.append(("end to end", label, run, targets[key]))
            continue
        status = "" if run["status"] == "ok" else f" ({run['status']})"
        parts = [f"{run['wall_s']:.0f} s in all{status}"]
        if run.get("setup_s") is not None:
            parts.append(f"setup {run['setup_s']:.0f} s")
        if run.get("first_step_s") is not None:
            parts.append(f"first step at {run['first_step_s']:.0f} s")
        if "steps_per_s" in run:
            parts.append(f"steps {run['steps']} at {run['steps_per_s']:.1f}/s")
        if "report_s" in run:
            parts.append(f"{run['report_s']:.0f} s after the last step")
        bleu = run["bleu"]
        parts.append(_why(bleu) or f"BLEU {bleu['bleu']:.2f}, beam {bleu['beam_size']}, "
                     f"{bleu['split']}")  # fmt: skip
        rows.append(("end to end", label, "; ".join(parts), targets[key]))
    return rows


def tests_rows(stage: Any) -> list[Row]:
    if _why(stage):
        return [("tests", "pytest", stage, "all pass")]
    counts = stage["counts"]
    result = _why(counts) or ", ".join(f"{n} {k}" for k, n in counts.items())
    if not _why(counts) and stage.get("status", "ok") != "ok":  # counted up to the cut
        result += f" ({stage['status']})"
    if stage.get("failed"):
        result += "; failed: " + ", ".join(stage["failed"])
    return [("tests", f"pytest, {len(stage['files'])} files", result, "all pass")]


def flags_rows(stage: Any) -> list[Row]:
    if stage is None or _why(stage):
        return []  # not asked for (not a default job): no row
    rows = []
    for label, variant in stage["variants"].items():
        got = variant["result"]
        if not _why(got):
            got = (
                f"compile (first call) {got['first_call_s']:.1f} s, {got['step_ms']:.2f} ms a step"
            )
        rows.append(("flags", f"{stage['size']} step, {label} ({variant['xla_flags']})", got, ""))
    return rows


def rows(report: dict) -> list[Row]:
    stages = report["stages"]
    return [
        *programs_rows(stages["programs"]),
        *speed_rows(stages["speed"]),
        *end_to_end_rows(stages["end_to_end"]),
        *tests_rows(stages["tests"]),
        *flags_rows(stages.get("flags")),
    ]


def format_table(report: dict) -> str:
    """A Markdown table under one line naming the device, date, jax and the command."""
    head = (
        f"{report['device']} | {report['date']} | jax {report['jax_version']} | {report['command']}"
    )
    lines = [head, "", "| stage | what | result | target |", "|---|---|---|---|"]
    lines += [
        "| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows(report)
    ]
    return "\n".join(lines)
