r"""What a launcher checks before anything is built: its flags, the config file, the overrides.

Every mistake on a command line becomes one `FATAL: ...` line on stderr (exit code 2, no
traceback) naming the bad value and the valid choices, before a workdir is created or any
data is prepared: a missing config file, a variant typo, `--config.x=y` naming an unknown
key or giving a non-number for a numeric key, an unknown flag, a missing required flag. The
config's values are checked after that, once, by `training.validate_config` (raising
`ConfigError`, which a launcher prints with `fatal`).

ml_collections' `config_flags` loads the config file and applies the overrides while absl
parses the flags, and reports a mistake there as a long traceback (or, for a missing file,
only when the config is first read). So `flags_parser` checks the same things first, with
the messages of `launch_config_args`, and then lets absl parse. Use it in any launcher:

    config_flags.DEFINE_config_file("config", None, "Run config file, e.g. ...")
    flags.DEFINE_string("workdir", None, "Directory of the run, e.g. --workdir=runs/fra_eng.")
    ...
    def main(argv):
        try:
            training.validate_config(FLAGS.config)
        except training.ConfigError as error:
            launch.fatal(f"invalid config: {error}")

    if __name__ == "__main__":
        app.run(main, flags_parser=launch.flags_parser(required=("config", "workdir")))

`print_config(config)` prints a resolved config (for `--print_config`).

This module is what launchers import; each concern beside `flags_parser` lives in its own
module, and every public name is offered here too:
  launch_help            `--help`: the launcher's docstring and the project's flags, exit 0
  launch_renamed_flags   old flag names still accepted, with a note (`RENAMED_FLAGS`)
  launch_config_args     `--config=` and `--config.x=y` checked before absl parses them
  launch_logs            `quiet_library_logs()`: orbax's and JAX's routine records dropped
  launch_decoding_flags  `define_decoding_flags()`: the flags translate, evaluate and serve
                         share; `decoding_flag_values()` reads them back as keywords
  launch_cache           `--compilation_cache_dir` and `use_compilation_cache()`: compiled
                         programs kept on disk for the next command
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import ml_collections
from absl import flags

from transformer_jax.evaluation.stream_encoding import lenient_stdout
from transformer_jax.launch_cache import (
    DEFAULT_COMPILATION_CACHE_DIR,
    define_compilation_cache_flag,
    use_compilation_cache,
)
from transformer_jax.launch_config_args import (
    check_config_args,
    check_overrides,
    resolve_config_args,
)
from transformer_jax.launch_decoding_flags import (
    DECODING_KEYWORDS,
    OPTION_KEYWORDS,
    decoding_flag_values,
    decoding_option_values,
    define_decoding_flags,
)
from transformer_jax.launch_help import help_asked, launcher_help
from transformer_jax.launch_logs import quiet_library_logs
from transformer_jax.launch_renamed_flags import RENAMED_FLAGS, rename_deprecated_flags
from transformer_jax.runtime import backend
from transformer_jax.runtime.interrupts import redeliver_interrupts
from transformer_jax.training.config import ConfigError
from transformer_jax.training.config_files import (
    SHIPPED_CONFIGS,
    load_config_file,
    resolve_config_path,
)

# What launchers find here: the helpers of the launch_* modules and training.config_files.
__all__ = [
    "DECODING_KEYWORDS",
    "DEFAULT_COMPILATION_CACHE_DIR",
    "OPTION_KEYWORDS",
    "RENAMED_FLAGS",
    "SHIPPED_CONFIGS",
    "STDOUT_CLOSED_EXIT",
    "check_config_args",
    "check_overrides",
    "decoding_flag_values",
    "decoding_option_values",
    "define_compilation_cache_flag",
    "define_decoding_flags",
    "fatal",
    "flags_parser",
    "launcher_help",
    "load_config_file",
    "print_config",
    "quiet_library_logs",
    "rename_deprecated_flags",
    "resolve_config_args",
    "resolve_config_path",
    "start_backend",
    "stdout_closed",
    "use_compilation_cache",
]


def fatal(message: str) -> NoReturn:
    """Ends the process with one `FATAL:` line on stderr and exit code 2."""
    print(f"FATAL: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


def start_backend() -> str:
    """Starts JAX's backend (`runtime.backend.start`) once the process settings are applied
    (XLA flags, `--cpu_devices`); returns its platform. A platform that cannot start
    (JAX_PLATFORMS=cuda without a GPU) is one FATAL line."""
    try:
        return backend.start()
    except backend.BackendError as error:
        fatal(str(error))


# A tool's exit status when its reader leaves: 128 + SIGPIPE, as `yes | head -1` ends.
STDOUT_CLOSED_EXIT = 141


def stdout_closed() -> NoReturn:
    """Ends the process quietly because the reader of stdout went away (`... | head -1`),
    as Unix tools do: no FATAL line, exit code `STDOUT_CLOSED_EXIT`."""
    # Point stdout at /dev/null first: the interpreter's last flush would fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(STDOUT_CLOSED_EXIT)


def flags_parser(
    *,
    required: Sequence[str] = (),
    unless: str | None = None,
    config_flag: str = "config",
    flag_values: flags.FlagValues = flags.FLAGS,
    module: str | None = None,
    lenient_stdout_encoding: bool = True,
) -> Callable[[list[str]], list[str]]:
    """An absl `flags_parser` for `app.run` that turns every flag mistake into a FATAL line.

    `required`: flags that must be given, unless the boolean flag `unless` is set (e.g.
    `--print_config` needs no `--workdir`). `config_flag`: the `DEFINE_config_file` flag.
    `--help` (and `--helpfull`) print `launcher_help(module)` and exit 0; `module` is the
    launcher's module name, by default the module that calls `flags_parser`. Parsing also
    makes a Ctrl-C that Python would drop inside a garbage-collector callback count
    (`runtime.interrupts.redeliver_interrupts`), and, with `lenient_stdout_encoding`, prints
    a character a non-UTF-8 stdout cannot hold as a backslash escape
    (`evaluation.stream_encoding.lenient_stdout`: reports are whole in their files); not for
    translate, whose stdout is the translations (it refuses such a stdout before decoding).
    """
    module = module or sys._getframe(1).f_globals["__name__"]

    def parse(argv: list[str]) -> list[str]:
        redeliver_interrupts()
        if lenient_stdout_encoding:
            lenient_stdout()
        asked = help_asked(argv[1:])
        if asked:
            print(launcher_help(module, full=asked == "full", flag_values=flag_values))
            sys.exit(0)
        argv = rename_deprecated_flags(argv, flag_values)
        argv = resolve_config_args(argv, config_flag=config_flag)
        try:
            check_config_args(argv, config_flag=config_flag)
        except ConfigError as error:
            fatal(str(error))
        try:
            rest = flag_values(argv)
        except (flags.Error, ValueError, TypeError, KeyError, AttributeError, OSError) as error:
            fatal(_last_line(error))
        _expand_home(flag_values)
        if unless is None or not flag_values[unless].value:
            for name in required:
                if flag_values[name].value in (None, ""):
                    fatal(f"--{name} is missing: {flag_values[name].help}")
        return rest

    return parse


# The launchers' flags that name files or directories.
PATH_FLAGS = (
    "workdir", "output_workdir", "init_from", "model_dir", "output_dir", "report_dir",
    "data_dir", "zip_path", "input_file", "output_file", "attention_plot", "sweep_dir",
    "compilation_cache_dir",
)  # fmt: skip


def _expand_home(flag_values: flags.FlagValues) -> None:
    """`~` at the start of a path flag's value (and of each run of an ensemble's
    `--workdir=~/a,~/b`) is the home directory, as in a shell word: bash leaves
    `--workdir=~/w` as it is, and the launchers then wrote the lock in ./~/w and the
    checkpoints in $HOME/w."""
    for name in PATH_FLAGS:
        if name not in flag_values:
            continue
        value = flag_values[name].value
        if isinstance(value, str) and "~" in value:
            expanded = ",".join(_expanded(part) for part in value.split(","))
            if expanded != value:
                flag_values[name].value = expanded


def _expanded(part: str) -> str:
    stripped = part.lstrip()  # `a, ~/b`: the space after a comma stays
    return part[: len(part) - len(stripped)] + os.path.expanduser(stripped)


def print_config(config: ml_collections.ConfigDict) -> None:
    """Prints the resolved config (every key, overrides applied) to stdout."""
    print(config, end="")


def _last_line(error: BaseException) -> str:
    # absl's and config_flags' messages can span lines (a nested traceback); the last
    # non-empty line names the problem.
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
