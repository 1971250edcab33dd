"""XLA flags chosen by a run config (`config.xla_flags`), applied before JAX starts its backend.

XLA reads `XLA_FLAGS` once, when the first backend is created, so a config's flags can
take effect only in a process that has not computed anything yet: a launcher
(`experiments/train.py`) or a fresh benchmark process. `apply` appends them to
`XLA_FLAGS` then, and later only warns. A flag the user already set in `XLA_FLAGS` wins.
Flag names belong to the pinned jaxlib: XLA stops the process at start-up on a name it
does not know, before anything is computed or written, with "Unknown flag in XLA_FLAGS:
--name" (tested), so a typo costs a second, not a run.

The one such flag in use: `--xla_cpu_experimental_ynn_fusion_type=dot,eltwise,reduce`
lets XLA:CPU hand elementwise and reduction fusions to YNNPACK too, not only dots. It pays
where the step is hundreds of tiny ops (the `d2l` size) and not at larger sizes, so the
`d2l` config sets it and the others do not (measured: benchmarks/README.md, "Numbers
behind the runtime knobs").
"""

from __future__ import annotations

import logging
import os
import re
import shlex

_FLAG = re.compile(r"^--[A-Za-z0-9_]+(=\S*)?$")


def parse(flags: str) -> dict[str, str]:
    """`"--a=1 --b"` -> {"--a": "--a=1", "--b": "--b"}; raises ValueError on anything else."""
    parsed = {}
    for token in flags.split():
        if not _FLAG.match(token):
            raise ValueError(
                f"xla_flags: {token!r} is not an XLA flag; write space-separated "
                "'--name=value' tokens, e.g. '--xla_cpu_experimental_ynn_fusion_type=dot'."
            )
        parsed[token.partition("=")[0]] = token
    return parsed


def environment_flags() -> dict[str, str]:
    """The flags in XLA_FLAGS as XLA reads them, name -> token: quoted values allowed
    (`--xla_dump_to="/tmp/xla dump"`), nothing refused (the user's own flags are XLA's to
    judge: it stops at start-up on one it does not know), unlike a config's (`parse`)."""
    text = os.environ.get("XLA_FLAGS", "")
    try:
        tokens = shlex.split(text)
    except ValueError:  # an unbalanced quote: the names are still what matters here
        tokens = text.split()
    return {token.partition("=")[0]: token for token in tokens if token.startswith("--")}


def backends_initialized() -> bool:
    """Whether JAX has created a backend in this process (after which XLA_FLAGS is fixed)."""
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - private module moved: assume the worst
        return True
    return bool(xla_bridge.backends_are_initialized())


def apply(flags: str) -> bool:
    """Append `flags` to XLA_FLAGS for this process; returns whether all of them are in effect.

    Flags whose name XLA_FLAGS already sets are left as the user set them (logged).
    Once a backend exists nothing can change any more: then this only warns, naming the
    flags that are missing and how to pass them.
    """
    wanted = parse(flags)
    current = environment_flags() if wanted else {}
    missing = [token for name, token in wanted.items() if name not in current]
    for name, token in wanted.items():
        if name in current and current[name] != token:
            logging.info("xla_flags: keeping %s from XLA_FLAGS over %s", current[name], token)
    if not missing:
        return True
    if backends_initialized():
        logging.warning(
            "xla_flags %s not applied: JAX's backend already started in this process. Set "
            "them in the environment instead: XLA_FLAGS='%s'.",
            missing,
            " ".join(missing),
        )
        return False
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *missing]).strip()
    logging.info("xla_flags: XLA_FLAGS=%s", os.environ["XLA_FLAGS"])
    return True
