"""The Colab notebook runs top to bottom (on CPU, tiny config), so it never rots."""

from pathlib import Path

import nbformat
import pytest

from experiments import build_notebook

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "data" / "fra-eng.zip"


def test_notebook_is_generated_from_its_percent_source():
    assert build_notebook.main(["--check"]) == 0, "run: python -m experiments.build_notebook"
    nb = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    kinds = [c.cell_type for c in nb.cells]
    assert kinds.count("code") >= 5 and kinds.count("markdown") >= 4


def test_percent_parser_splits_code_and_markdown():
    nb = build_notebook.percent_to_notebook("# %% [markdown]\n# # Title\n# text\n\n# %%\nx = 1\n")
    assert [c.cell_type for c in nb.cells] == ["markdown", "code"]
    assert nb.cells[0].source == "# Title\ntext" and nb.cells[1].source == "x = 1"
    with pytest.raises(ValueError, match="must start with"):
        build_notebook.percent_to_notebook("x = 1\n")


@pytest.mark.slow  # trains for real
@pytest.mark.skipif(not CORPUS.exists(), reason=f"corpus not found at {CORPUS}")
def test_notebook_executes_on_cpu_with_a_tiny_config(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("TJ_CONFIG_ARG", "runlocal")
    monkeypatch.setenv("TJ_NUM_TRAIN_STEPS", "6")
    monkeypatch.setenv("TJ_WORKDIR", str(tmp_path / "run"))
    nb = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    )
    client.execute()
    text = "\n".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )
    assert "platform: CPU" in text
    # the inputs as the user wrote them, each with its translation (natural text)
    assert all(f"{line!r} =>" in text for line in ("Go.", "I lost.", "He's calm.", "I'm home."))
    images = [
        out
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert images, "the heatmap cell displayed no image"
    assert (tmp_path / "run" / "attention.png").stat().st_size > 5000


def test_help_and_mistakes_write_nothing(monkeypatch, tmp_path, capsys):
    notebook = tmp_path / "colab_tpu.ipynb"
    monkeypatch.setattr(build_notebook, "NOTEBOOK", notebook)
    for argv in (["--help"], ["--chek"]):
        with pytest.raises(SystemExit) as exit_info:
            build_notebook.main(argv)
        assert exit_info.value.code == (0 if argv == ["--help"] else 2)
        assert not notebook.exists(), argv
    assert "--check" in capsys.readouterr().out
    assert build_notebook.main([]) == 0 and notebook.is_file()  # asked: written
