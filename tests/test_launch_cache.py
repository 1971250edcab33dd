"""`--compilation_cache_dir` on every launcher that compiles: a second `translate` reads its
decoder from the cache the first one wrote; a directory that cannot be used is one note and
the command still translates; `JAX_COMPILATION_CACHE_DIR` wins over the flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax import launch

# JAX's own record of a program read back from the persistent cache (jax/_src/compiler.py),
# logged when its compiler module's debug logging is on.
HIT = "persistent compilation cache hit"
LAUNCHERS = ("train", "translate", "evaluate", "serve")


def _env(**extra: str) -> dict[str, str]:
    env = subprocess_env()
    env.pop("JAX_COMPILATION_CACHE_DIR")  # the flag under test decides, not the tests' cache
    # The tiny model's decoder compiles in well under JAX's 1 s threshold: keep every program.
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["JAX_DEBUG_LOG_MODULES"] = "jax._src.compiler"
    return {**env, **extra}


def _translate(workdir, *flags: str, env: dict[str, str] | None = None):
    argv = [sys.executable, "-m", "experiments.translate", f"--workdir={workdir}", *flags]
    return subprocess.run(
        argv, cwd=REPO, env=env or _env(), input="go .\n", capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_a_second_translate_reads_its_decoder_from_the_cache_the_first_wrote(
    tiny_workdir, tmp_path
):
    cache = tmp_path / "cache" / "xla"  # missing: created by the first command
    first = _translate(tiny_workdir, f"--compilation_cache_dir={cache}")
    assert first.returncode == 0, first.stderr[-3000:]
    written = sorted(p.name for p in cache.iterdir())
    assert any(name.startswith("jit_per_device") for name in written), written  # the decoder
    assert HIT not in first.stderr.lower()

    second = _translate(tiny_workdir, f"--compilation_cache_dir={cache}")
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout == first.stdout and second.stdout.strip()
    hits = [line for line in second.stderr.lower().splitlines() if HIT in line]
    assert any("jit_per_device" in line for line in hits), second.stderr[-3000:]


def test_an_empty_flag_turns_the_cache_off(tiny_workdir, tmp_path):
    for _ in range(2):  # the second run has nothing to read back
        result = _translate(tiny_workdir, "--compilation_cache_dir=", env=_env(HOME=str(tmp_path)))
        assert result.returncode == 0, result.stderr[-3000:]
        assert HIT not in result.stderr.lower()
    assert not (tmp_path / ".cache" / "transformer_jax").exists()  # nor the default


def test_the_default_is_under_home(tiny_workdir, tmp_path):
    result = _translate(tiny_workdir, env=_env(HOME=str(tmp_path)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert launch.DEFAULT_COMPILATION_CACHE_DIR == "~/.cache/transformer_jax/xla"
    assert any((tmp_path / ".cache" / "transformer_jax" / "xla").iterdir())


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_an_unusable_directory_is_one_note_and_the_command_still_translates(
    tiny_workdir, tmp_path, kind
):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    directory = blocker if kind == "a file" else blocker / "xla"
    result = _translate(tiny_workdir, f"--compilation_cache_dir={directory}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip()  # translated all the same
    lines = [line for line in result.stderr.splitlines() if "compilation_cache_dir" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"note: --compilation_cache_dir={directory} cannot be used (")
    assert lines[0].endswith("give a writable directory, or '' to turn it off.")
    assert "Error reading persistent compilation cache" not in result.stderr  # JAX's warning
    assert "Traceback" not in result.stderr


def test_the_environment_variable_wins_over_the_flag(tiny_workdir, tmp_path):
    from_env, from_flag = tmp_path / "env", tmp_path / "flag"
    result = _translate(
        tiny_workdir,
        f"--compilation_cache_dir={from_flag}",
        env=_env(JAX_COMPILATION_CACHE_DIR=str(from_env)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert any(from_env.iterdir()) and not from_flag.exists()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_compiling_launcher_takes_the_flag(launcher):
    result = subprocess.run(
        [sys.executable, "-m", f"experiments.{launcher}", "--help"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--compilation_cache_dir" in result.stdout
