"""Generate `experiments/colab_tpu.ipynb` from its percent-format source `colab_tpu.py`.

    python -m experiments.build_notebook          # writes the .ipynb
    python -m experiments.build_notebook --check  # exit 1 if the .ipynb is out of date

Cells start at `# %%` lines; `# %% [markdown]` cells hold `# `-prefixed markdown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

SOURCE = Path(__file__).with_name("colab_tpu.py")
NOTEBOOK = SOURCE.with_suffix(".ipynb")


def percent_to_notebook(text: str) -> nbformat.NotebookNode:
    """Percent-format Python source -> a notebook (code and markdown cells)."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            kind = "markdown" if "[markdown]" in line else "code"
            cells.append((kind, []))
        elif cells:
            cells[-1][1].append(line)
        elif line.strip():
            raise ValueError("colab_tpu.py must start with a '# %%' cell marker.")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["accelerator"] = "TPU"
    for kind, lines in cells:
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(
                line[2:] if line.startswith("# ") else line.lstrip("#")
                for line in body.splitlines()
            )
            nb.cells.append(nbformat.v4.new_markdown_cell(body))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(body))
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"  # stable ids, so regenerating gives the same file
    return nb


def render() -> str:
    return nbformat.writes(percent_to_notebook(SOURCE.read_text(encoding="utf-8"))) + "\n"


def main(argv: list[str]) -> int:
    """Writes the notebook, or with --check only compares it; --help (or a mistake on the
    command line) writes nothing."""
    parser = argparse.ArgumentParser(
        prog="python -m experiments.build_notebook",
        description=f"Generate {NOTEBOOK.name} from {SOURCE.name} (writes it unless --check).",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the .ipynb is out of date; write nothing"
    )
    args = parser.parse_args(argv)  # --help and unknown arguments exit here
    text = render()
    if args.check:
        current = NOTEBOOK.read_text(encoding="utf-8") if NOTEBOOK.exists() else ""
        if current != text:
            print(f"{NOTEBOOK} is out of date: run python -m experiments.build_notebook")
            return 1
        return 0
    NOTEBOOK.write_text(text, encoding="utf-8")
    print(f"wrote {NOTEBOOK}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
