"""The [export] extra: pyproject.toml declares CTranslate2 and flatbuffers (pinned as in
requirements.txt), and without them every command that needs one ends in one FATAL line
naming `pip install 'transformer_jax[export]'`, before reading a run or writing a folder."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.export.extras import INSTALL, MissingExtraError, import_extra

EXTRA = ("ctranslate2", "flatbuffers")


def test_the_export_extra_pins_its_libraries_as_requirements_txt():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    pins = dict(
        re.match(r"([\w.-]+)==(\S+)", line).groups()
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if re.match(r"[\w.-]+==", line)
    )
    assert sorted(extras["export"]) == sorted(f"{name}=={pins[name]}" for name in EXTRA)
    assert "[export]" in INSTALL


def test_import_extra_names_the_extra():
    assert import_extra("json", "anything").dumps([]) == "[]"
    with pytest.raises(MissingExtraError, match=r"--format=x needs no_such_lib_.*\[export\]"):
        import_extra("no_such_lib_zz", "--format=x")


@pytest.fixture
def without_extra(tmp_path) -> dict[str, str]:
    """A subprocess environment in which ctranslate2 and flatbuffers cannot be imported
    (packages of those names, first on the path, that raise ModuleNotFoundError)."""
    for name in EXTRA:
        package = tmp_path / "blocked" / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n"
        )
    env = subprocess_env()
    env["PYTHONPATH"] = f"{tmp_path / 'blocked'}:{env['PYTHONPATH']}"
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True,
        input="go .\n", timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["ctranslate2", "stablehlo"])
def test_export_without_the_extra_is_one_fatal_line(fmt, without_extra, tmp_path):
    out = tmp_path / "out"
    result = _run(
        without_extra, "experiments.export", f"--workdir={tmp_path / 'run'}", f"--format={fmt}",
        f"--output_dir={out}",
    )  # fmt: skip
    library = "ctranslate2" if fmt == "ctranslate2" else "flatbuffers"
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.startswith("FATAL: ") and result.stderr.count("\n") == 1, result.stderr
    assert f"needs {library}" in result.stderr and INSTALL in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "blocked"]


def test_ctranslate2_engine_without_the_extra_is_one_fatal_line(without_extra, tmp_path):
    result = _run(
        without_extra, "experiments.translate", "--engine=ctranslate2",
        f"--model_dir={tmp_path / 'model'}",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.startswith("FATAL: ") and result.stderr.count("\n") == 1, result.stderr
    assert "--engine=ctranslate2 needs ctranslate2" in result.stderr and INSTALL in result.stderr
    assert result.stdout == ""


def test_blocking_works(without_extra):
    """The fixture's blocking is real (else the tests above could pass for other reasons)."""
    probe = "import importlib.util, sys\ntry:\n import ctranslate2\nexcept ImportError: sys.exit(3)"
    assert subprocess.run([sys.executable, "-c", probe], env=without_extra).returncode == 3
    assert subprocess.run([sys.executable, "-c", probe], env=subprocess_env()).returncode == 0
