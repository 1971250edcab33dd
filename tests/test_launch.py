"""transformer_jax/launch.py offers every name launchers, benchmarks and tests take from it,
each the very object of the launch_* module (or training.config_files) that holds it."""

from __future__ import annotations

import pytest

from transformer_jax import (
    launch,
    launch_cache,
    launch_config_args,
    launch_decoding_flags,
    launch_help,
    launch_logs,
    launch_renamed_flags,
)
from transformer_jax.training import config_files

# Where each name lives since launch.py was split (every public name it had before).
HOMES = {
    launch_cache: (
        "DEFAULT_COMPILATION_CACHE_DIR",
        "define_compilation_cache_flag",
        "use_compilation_cache",
    ),
    launch_config_args: ("check_config_args", "check_overrides", "resolve_config_args"),
    launch_decoding_flags: (
        "DECODING_KEYWORDS",
        "OPTION_KEYWORDS",
        "decoding_flag_values",
        "decoding_option_values",
        "define_decoding_flags",
    ),
    launch_help: ("launcher_help",),
    launch_logs: ("quiet_library_logs",),
    launch_renamed_flags: ("RENAMED_FLAGS", "rename_deprecated_flags"),
    config_files: ("SHIPPED_CONFIGS", "load_config_file", "resolve_config_path"),
}


@pytest.mark.parametrize("home", HOMES, ids=lambda m: m.__name__)
def test_launch_offers_each_name_of_its_parts(home):
    for name in HOMES[home]:
        assert name in launch.__all__, name
        assert getattr(launch, name) is getattr(home, name), name


def test_all_names_launchs_own_and_the_parts_names_only():
    moved = {name for names in HOMES.values() for name in names}
    own = {"fatal", "flags_parser", "print_config", "start_backend", "stdout_closed"}
    own.add("STDOUT_CLOSED_EXIT")
    assert set(launch.__all__) == moved | own
