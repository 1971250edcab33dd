"""A run config's `xla_flags`: parsed strictly, applied before JAX starts, never silently lost."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from configs import fra_eng
from tests.helpers import subprocess_env
from transformer_jax.runtime import xla_flags
from transformer_jax.training import validate_config

YNN = "--xla_cpu_experimental_ynn_fusion_type=dot,eltwise,reduce"


def test_parse_accepts_flags_and_names_a_bad_token():
    assert xla_flags.parse(f"  {YNN} --xla_cpu_enable_fast_math  ") == {
        "--xla_cpu_experimental_ynn_fusion_type": YNN,
        "--xla_cpu_enable_fast_math": "--xla_cpu_enable_fast_math",
    }
    assert xla_flags.parse("") == {}
    with pytest.raises(ValueError, match=r"'fast' is not an XLA flag.*--name=value"):
        xla_flags.parse("--xla_a=1 fast")


def test_validate_config_rejects_bad_xla_flags():
    config = fra_eng.get_config("d2l")
    validate_config(config)
    config.xla_flags = "-O3"
    with pytest.raises(ValueError, match="xla_flags"):
        validate_config(config)


def test_after_the_backend_started_apply_warns_and_changes_nothing(monkeypatch, caplog):
    import jax.numpy as jnp

    jnp.ones(1).block_until_ready()  # the backend exists in the test process
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    with caplog.at_level(logging.WARNING):
        assert not xla_flags.apply(YNN)
    assert os.environ["XLA_FLAGS"] == "--xla_backend_optimization_level=0"
    assert "not applied" in caplog.text and YNN in caplog.text
    assert xla_flags.apply("")  # nothing asked, nothing missing


WORKER = textwrap.dedent(
    """
    import os, sys
    import jax, jax.numpy as jnp
    from transformer_jax.runtime import xla_flags
    ok = xla_flags.apply(sys.argv[1])
    x = jnp.ones((256, 256))
    hlo = jax.jit(lambda x: jnp.exp(x) * 2 + 1).lower(x).compile().as_text()
    print(ok, os.environ["XLA_FLAGS"], "ynn_fusion" in hlo, sep="|")
    """
)


def _run(flags: str, env_flags: str) -> list[str]:
    env = {**subprocess_env(), "XLA_FLAGS": env_flags}
    out = subprocess.run(
        [sys.executable, "-c", WORKER, flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1].split("|")


def test_in_a_fresh_process_the_flags_reach_xla():
    # The elementwise fusion goes to YNNPACK only with the flag: proof that XLA read it.
    ok, env, ynn = _run(YNN, "--xla_backend_optimization_level=0")
    assert (ok, ynn) == ("True", "True")
    assert env == f"--xla_backend_optimization_level=0 {YNN}"
    ok, env, ynn = _run("", "")
    assert (ok, env, ynn) == ("True", "", "False")


def test_a_flag_the_user_set_wins():
    mine = "--xla_cpu_experimental_ynn_fusion_type=dot"
    ok, env, ynn = _run(YNN, mine)
    assert (ok, env, ynn) == ("True", mine, "False")


def test_an_unknown_flag_stops_the_process_at_start_up_naming_it():
    env = {**subprocess_env(), "XLA_FLAGS": ""}
    out = subprocess.run(
        [sys.executable, "-c", WORKER, "--xla_cpu_no_such_flag=1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "Unknown flag in XLA_FLAGS: --xla_cpu_no_such_flag=1" in out.stderr


def test_the_users_quoted_flags_are_xlas_to_read(tmp_path):
    """XLA reads `--xla_dump_to="/a b"` (a quoted value with a space): a config's flags were
    refused beside it ("'b\"' is not an XLA flag"), a traceback blaming the config."""
    dump = tmp_path / "xla dump"
    mine = f'--xla_dump_to="{dump}" --xla_dump_hlo_as_text'
    ok, env, ynn = _run(YNN, mine)
    assert (ok, env, ynn) == ("True", f"{mine} {YNN}", "True")
    assert any(dump.iterdir())  # XLA read the quoted path whole
    with pytest.MonkeyPatch.context() as patch:  # an unbalanced quote: the names still
        patch.setenv("XLA_FLAGS", mine + " --xla_cpu_enable_fast_math=false 'unclosed")
        assert set(xla_flags.environment_flags()) == {
            "--xla_dump_to", "--xla_dump_hlo_as_text", "--xla_cpu_enable_fast_math"
        }  # fmt: skip
