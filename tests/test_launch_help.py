"""Every launcher's `--help` (transformer_jax/launch.py `launcher_help`): its docstring and its
own flags, the shared ones included, first; exit code 0; the same under `python -m` and as a
console command (`run()` called from another main module, as pip's wrapper script does;
tests/test_packaging.py runs the installed command itself)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env

LAUNCHERS = ("train", "translate", "evaluate", "sweep", "export", "average_checkpoints")


def _help(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _own_flags(launcher: str) -> list[str]:
    """The flag names the launcher's source defines with a literal first argument."""
    tree = ast.parse((REPO / "experiments" / f"{launcher}.py").read_text(encoding="utf-8"))
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("DEFINE_")
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("form", ["module", "console"])
def test_help_lists_the_launchers_flags_and_exits_0(launcher, form):
    module = f"experiments.{launcher}"
    args = (
        ["-m", module, "--help"]
        if form == "module"
        else ["-c", f"from {module} import run; run()", "--help"]
    )
    proc = _help(args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = ast.get_docstring(ast.parse((REPO / f"experiments/{launcher}.py").read_text()))
    assert proc.stdout.startswith(doc.splitlines()[0]), proc.stdout[:300]
    own = _own_flags(launcher)
    assert own, launcher
    for name in own:
        assert f"  --{name}:" in proc.stdout or f"  --[no]{name}:" in proc.stdout, name
    assert "--log_dir" not in proc.stdout  # absl's flags only under --helpfull
    assert "--helpfull" in proc.stdout.splitlines()[-1]


def test_help_lists_the_shared_decoding_flags():
    proc = _help(["-c", "from experiments.evaluate import run; run()", "--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("workdir", "step", "average_last", "beam_size", "alpha", "segment_len"):
        assert f"  --{name}:" in proc.stdout, name


def test_helpfull_puts_the_project_flags_before_the_libraries():
    proc = _help(["-m", "experiments.translate", "--helpfull"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert text.index("--input_file:") < text.index("--beam_size:") < text.index("--log_dir:")
    assert text.count("--input_file:") == 1 and text.count("--beam_size:") == 1
    # Help comes before any check: a command line that would be refused still gets it.
    refused = _help(["-m", "experiments.train", "--config=configs/nope.py", "--help"])
    assert refused.returncode == 0 and "--print_config" in refused.stdout, refused.stderr


def test_the_decoding_flags_are_listed_under_launch_as_before_the_split():
    from absl import flags

    from transformer_jax import launch_decoding_flags
    from transformer_jax.launch_help import help_asked, launcher_help

    flag_values = flags.FlagValues()
    launch_decoding_flags.define_decoding_flags(flag_values)
    text = launcher_help(__name__, flag_values=flag_values)
    assert "\ntransformer_jax.launch:\n  --alpha:" in text, text[:500]
    assert "transformer_jax.launch_decoding_flags" not in text
    assert text.splitlines()[-1].startswith("Try --helpfull")
    assert [help_asked(a) for a in (["-?"], ["x", "--helpfull"], ["--", "--help"], [])] == [
        "short",
        "full",
        None,
        None,
    ]
