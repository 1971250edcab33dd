"""How many pytest workers `-n auto` starts: one a core, as many as the memory holds.

xdist's "auto" counts cores only. A worker of this suite peaks near 3 GB (benchmarks/LOG.md,
the eighteenth session: 2.8 GB, a train launch of ~1 GB beside it at times), so a machine
with many cores and little memory a core (a CI runner, a container with a memory limit)
would run out of memory at one worker a core. The conftest's `pytest_xdist_auto_num_workers`
takes the smaller of xdist's count and `available memory // WORKER_BYTES`.
"""

from __future__ import annotations

from pathlib import Path

WORKER_BYTES = 4 << 30  # a worker's peak and a launch beside it, rounded up
# A container's limit (cgroup v2, then v1); "max" or a huge number when there is none.
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def workers(cores: int, available: int | None) -> int:
    """`cores`, at most as many as `available` bytes hold (unknown: `cores`), at least 1."""
    if available is None:
        return max(1, cores)
    return max(1, min(cores, available // WORKER_BYTES))


def available_memory(meminfo: str = "/proc/meminfo", limits=_CGROUP_LIMITS) -> int | None:
    """Bytes this process may still use: the kernel's MemAvailable, capped by a cgroup's
    limit; None where neither can be read (not Linux)."""
    found = []
    try:
        for line in Path(meminfo).read_text(encoding="utf-8").splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)  # kB
    except (OSError, ValueError, IndexError):
        pass
    for path in limits:
        try:
            text = Path(path).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text.isdigit():
            found.append(int(text))
    return min(found) if found else None
