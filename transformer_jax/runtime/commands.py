"""Shell commands that run the project's launchers, spelled as this install runs them.

Messages and closing reports print commands to paste: `Translate: ... --workdir=...`,
`Train one with: ...`. In a source checkout a launcher is `python -m experiments.<name>` and
a config is a file under configs/; installed (`pip install .`) it is the console command
`transformer-jax-<name>` (pyproject's [project.scripts]) and configs go by name. Values are
shell-quoted, so a workdir with spaces, quotes or `$` pastes as one argument:

    command("translate", workdir="runs/a b")
    # "python -m experiments.translate --workdir='runs/a b'"
"""

from __future__ import annotations

import shlex
from pathlib import Path

# transformer_jax/runtime/commands.py -> the repository root (in a checkout).
REPO_ROOT = Path(__file__).resolve().parents[2]
# Launcher module -> its console command's suffix, where they differ.
CONSOLE_NAMES = {"average_checkpoints": "average"}


def is_source_checkout() -> bool:
    """True when the package runs from the repository (not from an installed copy)."""
    return (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "configs").is_dir()


def launcher(name: str) -> str:
    """The command that runs launcher `name` ("train", "average_checkpoints", ...)."""
    if is_source_checkout():
        return f"python -m experiments.{name}"
    return f"transformer-jax-{CONSOLE_NAMES.get(name, name)}"


def command(name: str, **flags: object) -> str:
    """Launcher `name` with `--flag=value` for each of `flags`, every value shell-quoted."""
    return " ".join([launcher(name), *(f"--{k}={shlex.quote(str(v))}" for k, v in flags.items())])


def train_command(workdir: object, config: str = "fra_eng") -> str:
    """The command that trains shipped config `config` into `workdir`."""
    spec = f"configs/{config}.py" if is_source_checkout() else config
    return command("train", config=spec, workdir=workdir)


def shell_path(path: object) -> str:
    """`path` as one shell word (quoted only when it needs to be)."""
    return shlex.quote(str(path))
