"""benchmarks.profile_step's op table: it reads the newest trace of a reused directory."""

import gzip
import json
import os

from benchmarks.profile_step import op_table


def _write_trace(path, events):
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)


def test_op_table_reads_the_newest_run_and_skips_bookkeeping(tmp_path):
    old = tmp_path / "plugins/profile/2026_01_01/perfetto_trace.json.gz"
    new = tmp_path / "plugins/profile/2026_01_02/perfetto_trace.json.gz"
    _write_trace(old, [{"ph": "X", "name": "stale_fusion.1", "dur": 9_000_000}])
    _write_trace(
        new,
        [
            {"ph": "X", "name": "ynn_fusion.3", "dur": 4_000},
            {"ph": "X", "name": "ynn_fusion.7", "dur": 2_000},
            {"ph": "X", "name": "copy.2", "dur": 1_000},
            {"ph": "X", "name": "ThunkExecutor::Execute", "dur": 50_000},
            {"ph": "M", "name": "thread_name"},
        ],
    )
    # The older run directory sorts first by name; give it the older mtime too.
    os.utime(old, (1_000, 1_000))
    rows = op_table(tmp_path, steps=2)
    assert rows == [("ynn_fusion", 3.0, 1), ("copy", 0.5, 0)]


def _gpu_trace(ops_line: bool) -> list[dict]:
    """A trace laid out as on a GPU: the host process, and a device process with a kernel
    stream, the per-program line and (`ops_line`) one event per HLO op."""
    meta = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 2, "tid": 10, "name": "thread_name", "args": {"name": "Stream #7"}},
        {"ph": "M", "pid": 2, "tid": 11, "name": "thread_name", "args": {"name": "XLA Modules"}},
        {"ph": "M", "pid": 2, "tid": 12, "name": "thread_name", "args": {"name": "XLA Ops"}},
    ]
    spans = [
        {"ph": "X", "pid": 1, "tid": 1, "name": "PjitFunction(step)", "dur": 90_000},
        {"ph": "X", "pid": 1, "tid": 1, "name": "loop_fusion.1", "dur": 70_000},  # host side
        {"ph": "X", "pid": 2, "tid": 10, "name": "gemm_kernel_sm90", "dur": 6_000},
        {"ph": "X", "pid": 2, "tid": 10, "name": "loop_fusion_kernel", "dur": 2_000},
        {"ph": "X", "pid": 2, "tid": 11, "name": "jit_step", "dur": 8_500},
    ]
    if ops_line:
        spans += [
            {"ph": "X", "pid": 2, "tid": 12, "name": "gemm_fusion.4", "dur": 6_000},
            {"ph": "X", "pid": 2, "tid": 12, "name": "loop_fusion.9", "dur": 2_000},
        ]
    return meta + spans


def test_on_a_gpu_only_the_device_ops_count(tmp_path):
    """The device's "XLA Ops" line where it has one, else its kernels; never the host's
    events (the same work seen from the host) nor the whole-program line."""
    _write_trace(tmp_path / "a/perfetto_trace.json.gz", _gpu_trace(ops_line=True))
    assert op_table(tmp_path / "a", steps=1) == [("gemm_fusion", 6.0, 1), ("loop_fusion", 2.0, 1)]
    _write_trace(tmp_path / "b/perfetto_trace.json.gz", _gpu_trace(ops_line=False))
    rows = op_table(tmp_path / "b", steps=1)
    assert rows == [("gemm_kernel_sm90", 6.0, 1), ("loop_fusion_kernel", 2.0, 1)]
