"""Output files that a failure never half-writes, and that are never the input itself.

    with open_output("out.txt") as output:   # moved into place when the block ends
        output.write(...)
    write_lines(lines, "out.txt", sys.stdout)

translate (both engines) writes its lines here (`evaluation.translate_cli`,
`experiments/translate.py`): `check_output_not_input` refuses an output that is the file the
sentences come from, and `open_output` replaces an existing file only once the new one is
whole.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from transformer_jax.evaluation.stream_encoding import OutputEncodingError, encoding_problem


def write_lines(lines: Sequence[str], output_file: str | Path | None, stdout: TextIO) -> None:
    """The lines, each ending in `\\n`, to `output_file` (UTF-8; `open_output`: replaced
    whole once written) or else `stdout`, flushed. A character `stdout`'s encoding cannot
    hold that `stream_encoding.check_translations_fit` did not foresee (the CTranslate2
    engine's TSV sources) is an `OutputEncodingError` naming its encoding and the fixes."""
    text = "".join(f"{line}\n" for line in lines)
    if output_file:
        with open_output(output_file) as output:
            output.write(text)
        return
    try:
        stdout.write(text)  # a text stream encodes it all first: no line half-written
    except UnicodeEncodeError as error:
        unfit = error.object[error.start : error.end]
        raise OutputEncodingError(encoding_problem(stdout, unfit[:1])) from None
    stdout.flush()


def check_output_not_input(
    output_file: str | Path | None, input_file: str | Path | None, stdin: TextIO | None
) -> None:
    """A ValueError if `output_file` is the file the sentences come from: `input_file`, or
    (None or "-") the regular file stdin reads (`< in.txt`). The same file (the same inode:
    a hard or symbolic link too) would be replaced by the translations of itself, or with
    a plain open() emptied before it is read. Only a regular output is compared: `/dev/stdout`
    and a terminal may be stdin's device too, and nothing is replaced there."""
    if not output_file:
        return
    try:
        out = os.stat(output_file)
    except OSError:  # not there yet (or unreadable: opening it says why)
        return
    if not stat.S_ISREG(out.st_mode):
        return
    try:
        if input_file and input_file != "-":
            source, where = os.stat(input_file), f"--input_file={input_file}"
        elif stdin is not None:
            source, where = os.fstat(stdin.fileno()), f"stdin reads it: < {output_file}"
        else:
            return
    except (AttributeError, OSError, ValueError):  # no such input (read_sentences says), or no fd
        return
    if (source.st_dev, source.st_ino) == (out.st_dev, out.st_ino):
        raise ValueError(
            f"--output_file={output_file} is the input ({where}): its sentences would be "
            "replaced by their translations; write them to another file."
        )


@contextlib.contextmanager
def open_output(output_file: str | Path, *, stream: bool = False) -> Iterator[TextIO]:
    """`output_file` opened for writing (UTF-8, "\\n" line ends), so that a failure leaves
    an existing file as it was: the lines go to a temporary file beside it, moved into its
    place (`os.replace`, atomic) when the block ends without an exception, and removed when
    it raises (Ctrl-C and `sys.exit` included). Opened before decoding: a bad path fails
    first.

    `stream`: written in place instead, each line visible as it is flushed (translate's
    stdin stream: a co-process may read the file as it grows), so a failure leaves the lines
    written so far; so too a path that is not a regular file (`/dev/stdout`, a pipe) and a
    file whose directory cannot hold another."""
    path = Path(os.path.realpath(output_file))  # a symbolic link's target is replaced
    existing = path.stat() if path.exists() else None
    if stream or (existing is not None and not stat.S_ISREG(existing.st_mode)):
        with open(output_file, "w", encoding="utf-8", newline="\n") as output:
            yield output
        return
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        # The mode an open() would give a new file (0o666 less the umask), or the old one's.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except PermissionError:
        if existing is None:
            raise
        with open(output_file, "w", encoding="utf-8", newline="\n") as output:
            yield output  # a writable file in a closed directory: in place
        return
    try:
        with open(fd, "w", encoding="utf-8", newline="\n") as output:
            if existing is not None:
                os.chmod(temporary, stat.S_IMODE(existing.st_mode))
            yield output
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
