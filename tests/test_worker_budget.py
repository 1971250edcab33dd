"""`-n auto` starts no more pytest workers than the memory holds (tests/worker_budget.py)."""

from __future__ import annotations

from tests import worker_budget

GIB = 1 << 30


def test_workers_are_the_cores_unless_the_memory_holds_fewer():
    assert worker_budget.workers(2, 24 * GIB) == 2  # this project's VM: as before
    assert worker_budget.workers(64, 128 * GIB) == 32  # many cores, 2 GiB a core
    assert worker_budget.workers(16, 3 * GIB) == 1  # never none
    assert worker_budget.workers(8, None) == 8  # memory unknown: the cores


def test_available_memory_is_capped_by_a_containers_limit(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 263842304 kB\nMemAvailable: 251658240 kB\n", encoding="utf-8")
    v2, v1 = tmp_path / "memory.max", tmp_path / "limit_in_bytes"
    v2.write_text("max\n", encoding="utf-8")  # cgroup v2 without a limit
    v1.write_text(f"{8 * GIB}\n", encoding="utf-8")  # a container of 8 GiB
    assert worker_budget.available_memory(meminfo, (v2,)) == 240 * GIB
    assert worker_budget.available_memory(meminfo, (v2, v1)) == 8 * GIB
    assert worker_budget.available_memory(tmp_path / "absent", ()) is None
