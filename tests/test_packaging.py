"""The installed package: a plain, non-editable `pip install` into a fresh virtualenv, then a
tiny train and translate through the console commands, from a directory outside the source.

The fresh virtualenv gets this test environment's site-packages on its path (a `.pth` line)
for the dependencies, so nothing is downloaded; the package itself is built from a copy of
the source tree and installed as a wheel, exactly as `pip install .` installs it.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import SHARED_ZIP

COMMANDS = ("train", "translate", "evaluate", "sweep", "export", "average", "serve")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _minimum_python(spec: str) -> tuple[int, ...]:
    """The lowest version a Requires-Python spec allows: ">=3.11" -> (3, 11, 0); () if none."""
    found = re.search(r">=\s*(\d+(?:\.\d+)*)", spec or "")
    parts = [int(part) for part in found.group(1).split(".")] if found else []
    return tuple(parts + [0] * (3 - len(parts)))[:3] if parts else ()


def test_requires_python_is_what_the_pinned_dependencies_need():
    ours = _minimum_python(_pyproject()["project"]["requires-python"])
    pinned = [
        line.split("==")[0]
        for line in (REPO / "requirements.txt").read_text().split()
        if "==" in line
    ]
    needs = {
        name: _minimum_python(importlib.metadata.metadata(name).get("Requires-Python"))
        for name in pinned
    }
    too_new = {name: need for name, need in needs.items() if need > ours}
    assert not too_new, f"requires-python allows {ours}, but these need more: {too_new}"
    assert ours == max(needs.values()), "requires-python asks for more than any pin needs"


def test_pyproject_lists_every_package_and_maps_configs_and_experiments():
    setuptools = _pyproject()["tool"]["setuptools"]
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "transformer_jax").rglob("__init__.py")
    }
    mapped = setuptools["package-dir"]
    assert mapped == {
        "transformer_jax.configs": "configs",
        "transformer_jax.experiments": "experiments",
    }
    assert all((REPO / d / "__init__.py").is_file() for d in mapped.values())
    assert sorted(setuptools["packages"]) == sorted(found | set(mapped))
    scripts = _pyproject()["project"]["scripts"]
    assert sorted(scripts) == sorted(f"transformer-jax-{c}" for c in COMMANDS)
    for target in scripts.values():  # each names a module of experiments/ and its run()
        module, _, function = target.partition(":")
        source = REPO / "experiments" / f"{module.rsplit('.', 1)[1]}.py"
        assert module.startswith("transformer_jax.experiments.") and function == "run"
        assert "\ndef run() -> None:" in source.read_text(), source


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv with the package installed from a wheel of a copy of the source."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"
    anywhere = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache")

    def ignore(directory: str, names: list[str]) -> set[str]:
        top = (
            {".git", ".venv", "venv", "runs", "data", "build"} if Path(directory) == REPO else set()
        )
        return (top & set(names)) | anywhere(directory, names)

    shutil.copytree(REPO, source, ignore=ignore)
    wheels = root / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    venv = root / "venv"
    # Without its own pip (ensurepip: ~3.5 s): this pip installs into it (`--python` below).
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # The dependencies: this environment's packages, after the venv's own (a path entry, so
    # the editable checkout's import hook in there is not activated).
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_test_dependencies.pth").write_text("\n".join(sorted(outer)) + "\n")
    (wheel,) = wheels.glob("transformer_jax-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
        + ["--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return venv


def _env(home: Path) -> dict[str, str]:
    env = subprocess_env()
    env.pop("PYTHONPATH")  # nothing from the source tree
    env.pop("TFDS_DATA_DIR", None)
    env["HOME"] = str(home)  # the TFDS default, ~/tensorflow_datasets, lands in here
    return env


def test_installed_package_has_no_generic_top_level_names(installed, tmp_path):
    python = installed / "bin" / "python"
    probe = (
        "import importlib.util, transformer_jax, transformer_jax.launch as launch; "
        "print(transformer_jax.__file__); print(launch.SHIPPED_CONFIGS); "
        "print(importlib.util.find_spec('configs'), importlib.util.find_spec('experiments'))"
    )
    out = subprocess.run(
        [python, "-c", probe],
        cwd=tmp_path,
        env=_env(tmp_path),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert out[0].startswith(str(installed)), out  # the installed copy, not the checkout
    assert out[1] == str(Path(out[0]).parent / "configs"), out
    assert out[2] == "None None", out
    for command in COMMANDS:
        assert (installed / "bin" / f"transformer-jax-{command}").is_file(), command


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_console_commands_train_and_translate_from_any_directory(installed, tmp_path):
    bin_dir, home, work = installed / "bin", tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = _env(home)
    package = Path(
        subprocess.run(
            [bin_dir / "python", "-c", "import transformer_jax; print(transformer_jax.__file__)"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    ).parent
    before = sorted(p for p in package.rglob("*") if "__pycache__" not in p.parts)
    train = subprocess.run(
        [
            bin_dir / "transformer-jax-train",
            "--config=fra_eng:runlocal",  # a shipped config, by name
            "--workdir=run",
            f"--config.data.zip_path={SHARED_ZIP}",
            "--config.data.train_split=train[:500]",
            "--config.num_train_steps=6",
            "--config.eval_every_steps=6",
            "--config.checkpoint_every_steps=6",
            "--config.eval.num_bleu_examples=4",
            "--config.eval.num_test_examples=8",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert train.returncode == 0, (train.stdout + train.stderr)[-4000:]
    assert (work / "run" / "checkpoints" / "6").is_dir()
    assert (home / "tensorflow_datasets" / "fra_eng").is_dir()  # TFDS's default data dir
    after = sorted(p for p in package.rglob("*") if "__pycache__" not in p.parts)
    assert after == before, "the run wrote into the installed package"

    translate = subprocess.run(
        [bin_dir / "transformer-jax-translate", "--workdir=run", "--format=tsv"],
        input="go .\n\ni lost .\n",
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert translate.returncode == 0, translate.stderr[-3000:]
    # One output line per input line (source <TAB> translation; a 6-step model may say "").
    lines = translate.stdout.split("\n")
    assert len(lines) == 4 and lines[3] == "", translate.stdout
    assert lines[0].startswith("go .\t") and lines[2].startswith("i lost .\t"), lines

    missing = subprocess.run(
        [bin_dir / "transformer-jax-evaluate"], cwd=work, env=env, capture_output=True, text=True
    )
    assert missing.returncode == 2 and missing.stderr.startswith("FATAL: --workdir is missing")
    assert os.listdir(work) == ["run"]


def test_installed_commands_help_lists_their_own_flags(installed, tmp_path):
    """Installed, `__main__` is pip's wrapper script (no docstring, no flags): absl's own
    --help printed only `USAGE: ... [flags]` and exited 1 (launch.launcher_help)."""
    for command, flag in (("translate", "--input_file"), ("evaluate", "--num_examples")):
        proc = subprocess.run(
            [installed / "bin" / f"transformer-jax-{command}", "--help"],
            cwd=tmp_path,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"python -m experiments.{command}" in proc.stdout  # the module's docstring
        assert f"  {flag}:" in proc.stdout and "  --beam_size:" in proc.stdout, proc.stdout
        assert "--log_dir" not in proc.stdout  # absl's flags only under --helpfull
