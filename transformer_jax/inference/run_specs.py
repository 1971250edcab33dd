"""What a `--workdir` value names: runs, each maybe at a step (`dir@STEP`), one or an
ensemble separated by commas, where a comma may also be part of a run's name (a sweep
point's `norm_placement=pre,attention_kind=dot`).

    split_workdirs("runs/a@4000,runs/b")   # -> ["runs/a@4000", "runs/b"]
    split_checkpoint("runs/a@4000")        # -> ("runs/a", 4000)
"""

from __future__ import annotations

from pathlib import Path

from transformer_jax.workdir.checkpoints import NoCheckpointError


def split_checkpoint(spec: str | Path, step: int | None = None) -> tuple[str, int | None]:
    """`"runs/a@4000"` -> ("runs/a", 4000); a spec without an `@STEP` suffix -> (spec, step)."""
    workdir, at, suffix = str(spec).rpartition("@")
    if at and suffix.isdigit():
        return workdir, int(suffix)
    return str(spec), step


def split_workdirs(value: str | Path) -> list[str]:
    """The runs a `--workdir` value names: one (`dir` or `dir@STEP`), or an ensemble of
    comma-separated ones. A `Path` is one run as given (code that holds one workdir).

    A comma may also be part of a directory's name (a sweep point's: `norm_placement=pre,
    attention_kind=dot`), so the value is cut only where the pieces are existing directories:
    a value that is itself an existing directory is one run; otherwise the reading with the
    fewest runs in which each is an existing directory (`a,b=1,c` with `a` and `b=1,c`
    existing is two runs). Two readings with as few runs are a ValueError naming both (a
    space after a comma makes it a separator only: `a, b`). A value no reading fits is cut at
    every comma if it has one, so the missing run is named (`NoCheckpointError`).
    """
    if isinstance(value, Path):
        return [str(value)]
    pieces = str(value).split(",")
    if len(pieces) == 1:
        return [pieces[0].strip()] if pieces[0].strip() else []
    reading = _fewest_runs(pieces)
    if reading is not None:
        return reading
    specs = [piece.strip() for piece in pieces if piece.strip()]
    if len(specs) > 1:
        missing = [s for s in specs if not Path(split_checkpoint(s)[0]).is_dir()]
        if missing:
            raise NoCheckpointError(
                f"--workdir={value}: no such directory, and as an ensemble of {len(specs)} "
                f"runs {', '.join(missing)} "
                f"{'is not a directory' if len(missing) == 1 else 'are not directories'}. "
                "A name with commas is one run only if that directory exists; check the paths."
            )
    return specs


def _fewest_runs(pieces: list[str]) -> list[str] | None:
    """The one way to join consecutive comma-separated pieces into the fewest existing
    directories (each may end in @STEP); None if there is none; ValueError if two tie."""

    def run(i: int, j: int) -> str | None:
        spec = ",".join(pieces[i:j]).strip()
        return spec if spec and Path(split_checkpoint(spec)[0]).is_dir() else None

    n = len(pieces)
    # best[j]: (number of runs, readings of pieces[:j] with that many, up to two kept).
    best: list[tuple[int, list[list[str]]] | None] = [(0, [[]])] + [None] * n
    for j in range(1, n + 1):
        for i in range(j):
            spec = run(i, j) if best[i] is not None else None
            if spec is None:
                continue
            count, readings = best[i][0] + 1, [r + [spec] for r in best[i][1]]
            if best[j] is None or count < best[j][0]:
                best[j] = (count, readings[:2])
            elif count == best[j][0]:
                best[j] = (count, (best[j][1] + readings)[:2])
    if best[n] is None:
        return None
    first, *other = best[n][1]
    if other:
        raise ValueError(
            f"--workdir={','.join(pieces)} reads two ways, as the runs {first} or "
            f"{other[0]}: rename a directory, or write the separating commas as ', '."
        )
    return first
