"""Write an export into a temporary sibling folder and rename it into place on success.

    with staged_dir("exports/fra_eng_ct2", force=False) as tmp:
        write_everything(tmp)
    # exports/fra_eng_ct2 now holds it all, or (on any error) does not exist

An export that fails half-way (a missing library, a full disk, Ctrl-C) leaves no folder that
looks like an export, so running it again does not stop at "already exists". The sibling
(`.NAME.partial-XXXX` beside NAME) is on the same file system, so the rename is atomic.

`force` replaces only what an export may replace (`check_new`): an earlier export (it has
`export.json`) or an empty directory. Never a file, a training run, the workdir being
exported or a directory that holds it: `--force` once deleted a whole run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from transformer_jax.export.manifest import MANIFEST
from transformer_jax.workdir.checkpoints import CHECKPOINT_DIR, CONFIG_FILE
from transformer_jax.workdir.directory import write_problem

_ONLY = "--force replaces only an earlier export (a directory with export.json) or an empty one"


def _training_run(directory: Path) -> bool:
    """Whether `directory` holds a training run's config.json and checkpoints/."""
    return (directory / CONFIG_FILE).is_file() and (directory / CHECKPOINT_DIR).is_dir()


def _refusal(output_dir: Path, workdir: str | Path | None) -> str | None:
    """Why the existing `output_dir` must not be replaced, or None when --force may."""
    here = output_dir.resolve()
    if workdir is not None:
        run = Path(workdir).resolve()
        if run == here:
            return (
                f"--output_dir={output_dir} is the training run being exported (--workdir); "
                "replacing it would delete its checkpoints: choose another --output_dir, e.g. "
                f"{output_dir}_export."
            )
        if here in run.parents:
            return (
                f"--output_dir={output_dir} contains the training run being exported "
                f"({workdir}); replacing it would delete the run: choose a new --output_dir."
            )
    if _training_run(output_dir):
        return (
            f"--output_dir={output_dir} is a training run (config.json and checkpoints/); "
            f"{_ONLY}: choose a new --output_dir."
        )
    if not any(output_dir.iterdir()):
        return None
    if not (output_dir / MANIFEST).is_file():
        return (
            f"--output_dir={output_dir} is not empty and is not an earlier export (no "
            f"{MANIFEST}); {_ONLY}: choose a new --output_dir, or empty it yourself."
        )
    for root, dirs, _ in os.walk(output_dir):  # an export is a few files: a short walk
        if _training_run(Path(root)) and Path(root) != output_dir:
            return (
                f"--output_dir={output_dir} holds a training run ({root}); {_ONLY}, without "
                "runs in it: choose a new --output_dir, or move the run out."
            )
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return None


def check_new(output_dir: str | Path, force: bool, workdir: str | Path | None = None) -> Path:
    """`output_dir` as a Path if an export may be written there: it does not exist, or with
    `force` it is an earlier export or empty. Else a FileExistsError saying why and what to
    do: it is a file, the training run `workdir` or a directory holding it, another
    training run or a non-empty directory that no export wrote; or it exists and not `force`."""
    output_dir = Path(output_dir)
    if not output_dir.exists() and not output_dir.is_symlink():
        return output_dir
    if not output_dir.is_dir():
        raise FileExistsError(
            f"--output_dir={output_dir} is a file, not a directory; an export is a directory: "
            "choose a new --output_dir."
        )
    refusal = _refusal(output_dir, workdir)
    if refusal is not None:
        raise FileExistsError(refusal)
    if not force:
        raise FileExistsError(
            f"{output_dir} already exists; choose a new --output_dir or pass --force to replace it."
        )
    return output_dir


def _directory_mode() -> int:
    """The mode `mkdir` gives a new directory under this process's umask (0755 under 022)."""
    umask = os.umask(0o22)  # read it: os.umask returns the old value
    os.umask(umask)
    return 0o777 & ~umask


def check_writable_parent(output_dir: Path) -> None:
    """A ValueError naming --output_dir and the OS's reason unless the export can be made
    beside it (in its nearest existing parent): checked before anything is exported, and
    without it the error named the hidden `.partial` folder of the staging."""
    parent = output_dir.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    problem = write_problem(parent)
    if problem:
        raise ValueError(
            f"--output_dir={output_dir} cannot be written ({parent}: {problem}): choose "
            "another --output_dir."
        )


@contextlib.contextmanager
def staged_dir(
    output_dir: str | Path, *, force: bool = False, workdir: str | Path | None = None
) -> Iterator[Path]:
    """An empty temporary folder beside `output_dir`, renamed to it when the block ends
    without an error (an existing `output_dir` is then replaced, with `force`, if
    `check_new` allows), removed when it raises."""
    output_dir = check_new(output_dir, force, workdir)
    check_writable_parent(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.partial-", dir=output_dir.parent))
    try:
        yield tmp
        check_new(output_dir, force, workdir)  # made while we wrote: keep it, drop ours
        # mkdtemp made it 0700 (a private temporary): an export is read by other accounts
        # (a server's), so give it a normal directory's mode, as a CTranslate2 one has.
        tmp.chmod(_directory_mode())
        if output_dir.exists():  # --force: the old export goes only once the new one is whole
            old = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.old-", dir=output_dir.parent))
            os.replace(output_dir, old / output_dir.name)
            os.replace(tmp, output_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, output_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a rename
