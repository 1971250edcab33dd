"""decoding/batch_decode.py over several devices: how many a call is split over
(`_call_mesh`), that the split changes no token nor sample, and that a caller's
params_cache keeps the weights placed on a mesh. Runs in a subprocess with 2 CPU devices."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO, subprocess_env

SCRIPT = textwrap.dedent(
    """
    import jax, numpy as np
    from transformer_jax.decoding import batch_decode, shapes
    from transformer_jax.decoding.options import DecodeOptions
    from transformer_jax.testing import random_params, tiny_config

    assert jax.local_device_count() == 2, jax.devices()
    per = batch_decode.MIN_HYPOTHESES_PER_DEVICE

    def devices(n, hypotheses, batch_size=64):
        mesh, rows = batch_decode._call_mesh(n, batch_size, hypotheses)
        return mesh.devices.size, rows

    # Split once each device gets `per` hypotheses (rows x beam), at most the 2 devices.
    assert devices(1, 1) == (1, 1) and devices(1, per) == (1, 1)
    assert devices(1, 2 * per) == (2, 2)  # one sentence's beam split: its row padded to 2
    assert devices(per, 1) == (1, per) and devices(2 * per, 1) == (2, 2 * per)
    assert devices(3, per) == (2, 4) and devices(200, 1, batch_size=64) == (2, 64)
    # Fewer than a batch: a power of two up to ROW_STEP (8), then a multiple of it.
    rows = [shapes.call_rows(n, 64) for n in (1, 3, 5, 8, 9, 33, 63, 64, 65)]
    assert rows == [1, 4, 8, 8, 16, 40, 64, 64, 64]
    assert devices(33, 1) == (2, 40) and devices(9, 1) == (2, 16)

    cfg = tiny_config(23, 13, max_len=32)
    params = random_params(cfg, 0)
    rng = np.random.default_rng(0)
    sources = [list(rng.integers(4, 23, rng.integers(1, 9))) + [2] for _ in range(40)]
    settings = dict(max_decode_len=None, max_len_a=1.0, max_len_b=6, batch_size=16)
    sampling = DecodeOptions(temperature=1.5, nbest=2, seed=3)

    def decode_all():
        out = {}
        for n in (1, 5, 40):  # one device, then split
            for beam in (1, 4):
                got = batch_decode.decode_ids(
                    cfg, params, sources[:n], beam_size=beam, alpha=0.6, **settings
                )
                out[("ids", n, beam)] = [list(map(int, t)) for t in got]
            got = batch_decode.decode_nbest(cfg, params, sources[:n], options=sampling, **settings)
            out[("sample", n)] = [[h.ids for h in hyps] for hyps in got]
        return out

    split = decode_all()
    batch_decode.MIN_HYPOTHESES_PER_DEVICE = 10**9  # every call on one device
    assert devices(40, 4) == (1, 40)
    alone = decode_all()
    assert split == alone, [k for k in split if split[k] != alone[k]]

    # A caller's params_cache keeps the weights placed on each mesh between calls.
    cache = {}
    got = batch_decode.decode_ids(
        cfg, params, sources[:40], beam_size=1, alpha=0.6, params_cache=cache, **settings
    )
    assert [list(map(int, t)) for t in got] == alone[("ids", 40, 1)]
    (mesh,) = cache
    assert mesh.devices.size == 1  # this process now decodes everything on one device
    placed = cache[mesh]
    batch_decode.decode_ids(
        cfg, params, sources[:3], beam_size=1, alpha=0.6, params_cache=cache, **settings
    )
    assert cache == {mesh: placed} and cache[mesh] is placed  # reused, not placed again
    print("OK")
    """
)


@pytest.mark.slow  # a subprocess that compiles a few dozen small programs
def test_calls_split_over_devices_by_size_and_decode_the_same():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        env=subprocess_env(devices=2),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK" in proc.stdout
