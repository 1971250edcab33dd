"""One-line reasons for messages: a library's multi-line error reduced to its first line."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """The first non-empty line of `error`'s message, or its type's name if it has none."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
