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
