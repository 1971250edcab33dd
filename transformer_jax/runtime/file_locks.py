"""What flock raises on a filesystem that does not have it.

The project's locks (one trainer per workdir, one sweep per sweep folder, one build of a
dataset or tokenizer at a time) are `fcntl.flock`s. Some filesystems refuse it: Lustre
mounted without `-o flock` (ENOSYS), NFS without its lock daemon (ENOLCK), some FUSE and
network mounts (EOPNOTSUPP, EINVAL). Each lock then falls back to what it can do there
(its own docstring says what) with a warning, instead of failing every start.
"""

from __future__ import annotations

import errno

NO_FLOCK = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})


def lacks_flock(error: OSError) -> bool:
    """Whether `flock` failed because the filesystem has no file locks."""
    return error.errno in NO_FLOCK


def no_flock_reason(path: object, error: OSError) -> str:
    """'<path> is on a filesystem without file locks (flock: <the OS's words>)'."""
    return f"{path} is on a filesystem without file locks (flock: {error.strerror or error})"
