"""Every command in WORKSPACE.md and README.md names real modules, flags and config keys;
the cheap ones are run as written."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import subprocess_env

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "WORKSPACE.md", REPO / "README.md"]


def commands() -> list[str]:
    """Shell commands of the ```bash blocks, continuation lines joined, comments dropped."""
    out = []
    for doc in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith("python"):
                    out.append(line)
    return out


def _module_and_args(command: str) -> tuple[str, list[str]]:
    words = shlex.split(command.split("<")[0])
    if words[1] == "-m":
        return words[2], words[3:]
    return words[1].removesuffix(".py").replace("/", "."), words[2:]


COMMANDS = commands()
LAUNCHERS = sorted(
    {m for m, _ in map(_module_and_args, COMMANDS) if m.startswith(("experiments", "benchmarks"))}
)


def test_docs_have_commands():
    assert len(COMMANDS) >= 15
    assert any("experiments.train" in c for c in COMMANDS)


@pytest.mark.parametrize("module", LAUNCHERS)
def test_every_flag_used_in_the_docs_exists(module):
    assert importlib.util.find_spec(module) is not None, f"{module} does not exist"
    used = {
        a.split("=")[0].lstrip("-")
        for m, args in map(_module_and_args, COMMANDS)
        if m == module
        for a in args
        if a.startswith("--")
    }
    used = {u for u in used if not u.startswith("config.")}
    if not used:
        return
    source = Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")
    if "from absl import" not in source:  # a plain argv/argparse script
        for flag in used:
            assert f"--{flag}" in source or f'"{flag}"' in source, f"{module} --{flag}"
        return
    result = subprocess.run(
        [sys.executable, "-m", module, "--helpfull"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    help_text = result.stdout + result.stderr
    for flag in used:
        assert re.search(rf"--(\[no\])?{re.escape(flag)}\b", help_text), f"{module} --{flag}"


def test_every_config_override_in_the_docs_is_a_real_key():
    from configs import fra_eng

    for command in COMMANDS:
        module, args = _module_and_args(command)
        spec = next((a.split("=", 1)[1] for a in args if a.startswith("--config=")), None)
        if module != "experiments.train" or spec is None:
            continue
        config = fra_eng.get_config(spec.partition(":")[2] or None)
        for arg in args:
            if arg.startswith("--config."):
                node = config
                for part in arg[len("--config.") :].split("=")[0].split("."):
                    assert part in node, f"{arg} in {command!r}"
                    node = node[part]


def test_cheap_commands_run_as_written():
    cheap = [c for c in COMMANDS if "--dry_run" in c or "build_notebook" in c]
    assert len(cheap) >= 2
    for command in cheap:
        result = subprocess.run(
            [sys.executable, *shlex.split(command)[1:]],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=180,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        if "--dry_run" in command:
            assert result.stdout.count("experiments.train") == 4
