"""The book's check (d2l §11.7.5) as a test: `benchmarks.d2l_check` for one seed.

The `d2l` variant as the book trains it (200 epochs of 10 batches on its 601 pairs: 2,000
steps), started as a user starts it; then the book's four sentences, translated greedily and
scored with the book's BLEU (k = 2). The book's PyTorch code gets 0.50-1.00 per run here
(mean 0.72 over three); this test asks for at least 3 of the 4 exact and a mean of at least
0.75. Seed 0's figure is in benchmarks/README.md. About a minute of training on 2 cores, so
one seed only; a smaller run (fewer epochs) would no longer be the book's claim.

XLA runs at its default optimisation, as for a user: the tests' level 0 (tests/helpers.py)
rounds floats differently, which over 2,000 steps is another run (seed 0 at level 0: 2 of 4
exact, mean 0.665).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env

# The book's references for "go .", "i lost .", "he's calm .", "i'm home ." (d2l §10.7.8).
FRENCH = ["va !", "j'ai perdu .", "il est calme .", "je suis chez moi ."]


@pytest.mark.slow
def test_book_check_one_seed(tmp_path):
    out = tmp_path / "d2l_check.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.d2l_check",
            "--seeds=0",
            f"--workdir_root={tmp_path / 'runs'}",
            f"--out={out}",
        ],
        cwd=REPO,
        env={**subprocess_env(), "XLA_FLAGS": ""},  # the d2l config adds its own
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    (run,) = json.loads(out.read_text())
    exact = sum(t == f for t, f in zip(run["translations"], FRENCH, strict=True))
    summary = f"{run['translations']}, book BLEU {run['bleu']}"
    assert exact >= 3, summary
    assert statistics.mean(run["bleu"]) >= 0.75, summary
