"""A device out of memory is one line that names the stage, what is saved and what fits.

XLA's real error is provoked where it is cheap and certain: an allocation above any machine's
address space (in-process), and a training run whose train step needs 240 GiB, in a process
whose address space is capped (`RLIMIT_AS`, so that no machine's overcommit lets it through).
Later stages (a step after a checkpoint, the validation pass) get XLA's error injected where
JAX would raise it, in the launcher's own process.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request

import jax
import jax.numpy as jnp
import pytest

from configs import fra_eng
from tests.helpers import REPO, one_fatal_line, run_module_after, subprocess_env
from tests.tiny_run import tiny_command
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.runtime import device_memory
from transformer_jax.training.out_of_memory import MemoryWatch, next_grad_accum

needs_corpus = pytest.mark.skipif(
    not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"
)
OOM = "RESOURCE_EXHAUSTED: Out of memory allocating 3221225472 bytes."


def _real_out_of_memory() -> jax.errors.JaxRuntimeError:
    """XLA:CPU's own error: 256 TiB, above the 128 TiB a Linux process can address."""
    with pytest.raises(jax.errors.JaxRuntimeError) as caught:
        jax.jit(lambda: jnp.ones((1 << 46,), jnp.float32))().block_until_ready()
    return caught.value


def test_xla_out_of_memory_is_recognised_and_described():
    error = _real_out_of_memory()
    assert device_memory.is_out_of_memory(error)
    text = device_memory.describe(error, "in a test")
    assert text.startswith("The host (XLA:CPU) ran out of memory in a test (XLA: Out of memory")
    assert "281474976710656 bytes (262144.0 GiB)" in text, text
    assert not device_memory.is_out_of_memory(jax.errors.JaxRuntimeError("INTERNAL: other"))
    assert not device_memory.is_out_of_memory(MemoryError("RESOURCE_EXHAUSTED"))


def test_the_context_converts_only_out_of_memory_and_reads_its_texts_late():
    where = ["before"]
    with pytest.raises(device_memory.DeviceMemoryError) as caught:
        with device_memory.out_of_memory(lambda: where[0], "Fix it."):
            where[0] = "after"
            raise jax.errors.JaxRuntimeError(OOM)
    message = str(caught.value)
    assert "ran out of memory after (XLA: Out of memory allocating 3221225472 bytes (3.0 GiB))" in (
        message
    ), message
    assert message.endswith(". Fix it."), message
    assert isinstance(caught.value.__cause__, jax.errors.JaxRuntimeError)
    other = jax.errors.JaxRuntimeError("INVALID_ARGUMENT: not memory")
    with pytest.raises(jax.errors.JaxRuntimeError) as kept:
        with device_memory.out_of_memory("x", "y"):
            raise other
    assert kept.value is other


class FakeGpu:
    platform, device_kind = "gpu", "NVIDIA H100 80GB HBM3"

    def memory_stats(self):
        return {"bytes_limit": 60 << 30, "peak_bytes_in_use": 59 << 30}


@pytest.mark.parametrize("fraction", [None, ".95", "lots"])
def test_a_gpu_line_gives_the_memory_jax_may_use_and_when_more_can_be_had(monkeypatch, fraction):
    monkeypatch.setattr(jax, "local_devices", lambda: [FakeGpu()])
    if fraction is None:
        monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    else:
        monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", fraction)
    text = device_memory.describe(jax.errors.JaxRuntimeError(OOM), "in a step")
    assert text.startswith(
        "The NVIDIA H100 80GB HBM3 (gpu) ran out of memory in a step (JAX may use 60.0 GiB of "
        "it, 59.0 GiB at the peak"
    ), text
    more = (
        "; JAX takes XLA_PYTHON_CLIENT_MEM_FRACTION of a GPU at start-up (.75 by default): .95 "
        "gives it more where no other process uses this GPU; XLA: "
    )
    assert (more in text) == (fraction is None), text


@pytest.mark.parametrize(
    "recipe, devices, accum, expected",
    [
        ("default", 1, 1, 2),  # packed rows: 2,048 tokens / 64 = 32 rows a device
        ("default", 2, 4, 8),  # 16 rows a device
        ("default", 1, 32, None),  # one row a micro-batch already
        ("d2l", 1, 1, 2),  # 64 rows
    ],
)
def test_the_next_grad_accum_divides_every_batch_a_device_gets(recipe, devices, accum, expected):
    config = fra_eng.get_config(recipe)
    config.grad_accum_steps = accum
    assert next_grad_accum(config, devices) == expected


@needs_corpus
def test_a_real_out_of_memory_in_the_train_step_is_one_line(tmp_path):
    # FFN activations of 768 tokens x 2^24 features: XLA asks for 240 GiB in the first step.
    command = tiny_command(
        tmp_path / "run",
        4,
        "--config.model.model_dim=2",
        "--config.model.num_heads=1",
        "--config.model.ffn_dim=16777216",
    )

    # The cap is set in the launcher's own process, before JAX starts: no machine's
    # overcommit lets 240 GiB through it.
    cap = "import resource; resource.setrlimit(resource.RLIMIT_AS, (32 << 30, 32 << 30))"
    result = run_module_after(cap, "experiments.train", *command[3:])
    fatal = one_fatal_line(result)
    assert "FATAL: The host (XLA:CPU) ran out of memory in the train step at step 1" in fatal
    assert "(XLA: Out of memory allocating" in fatal and "GiB))" in fatal, fatal
    assert "Nothing was saved yet, so any setting may change" in fatal, fatal
    # runlocal: 16 rows a batch, so the same batch in 2 micro-batches fits the check.
    assert "--config.grad_accum_steps=2" in fatal and "--config.model.remat=True" in fatal
    assert "a smaller batch (data.batch_size=16) or model" in fatal, fatal


# XLA's error raised where JAX would raise it: by the train call of step 5 (the checkpoint of
# step 4 is saved), or by the validation pass at step 4 (after that checkpoint's save).
INJECT = {
    "train": """
        import jax
        from transformer_jax.training import train
        real = train._train_call
        def _train_call(built, state, batches):
            if int(jax.device_get(state.step).ravel()[0]) == 4:
                raise jax.errors.JaxRuntimeError({oom!r})
            return real(built, state, batches)
        train._train_call = _train_call
    """,
    "eval": """
        import dataclasses, jax
        from transformer_jax.training import train
        real = train.build
        def build(*args, **kwargs):  # the eval step fails at the second evaluation (step 4)
            built, calls = real(*args, **kwargs), []
            def eval_step(params, batch):
                calls.append(batch)
                if len(calls) == 2:
                    raise jax.errors.JaxRuntimeError({oom!r})
                return built.eval_step(params, batch)
            return dataclasses.replace(built, eval_step=eval_step)
        train.build = build
    """,
    "evaluators": """
        import jax
        from transformer_jax.evaluation import evaluators
        def ValidationBleu(context):  # the launcher's evaluator, failing at step 4
            def evaluate(params, step):
                if step == 4:
                    raise jax.errors.JaxRuntimeError({oom!r})
                return {{}}
            return evaluate
        evaluators.ValidationBleu = ValidationBleu
    """,
}


@needs_corpus
@pytest.mark.parametrize("stage", ["train", "eval", "evaluators"])
def test_a_later_out_of_memory_keeps_the_checkpoint_and_its_fix_resumes(tmp_path, stage):
    workdir = tmp_path / "run"
    command = tiny_command(workdir, 6)[3:]
    result = run_module_after(INJECT[stage].format(oom=OOM), "experiments.train", *command)
    fatal = one_fatal_line(result)
    assert "Nothing is lost: the checkpoint of step 4 is intact." in fatal, fatal
    if stage == "evaluators":
        assert "ran out of memory in the evaluators (validation BLEU) at step 4" in fatal, fatal
        assert fatal.endswith(
            "Re-run the same command with a smaller --config.eval.decode_batch_size (now 64 "
            "sentences a batch) or --config.eval.beam_size (now 1), or "
            "--config.eval.num_bleu_examples=0 (no validation BLEU): a resumed run accepts them."
        ), fatal
        return
    if stage == "eval":
        assert "ran out of memory in the validation pass at step 4" in fatal, fatal
        assert fatal.endswith(
            "Re-run the same command with --config.eval.loss_batch_size=8 (now 16 validation "
            "rows of 24 + 24 tokens a batch; the same loss at any size): a resumed run accepts it."
        ), fatal
        fixes = ("--config.eval.loss_batch_size=8",)
    else:
        assert "ran out of memory in the train step at step 5 (XLA: Out of memory allocat" in fatal
        assert "Re-run the same command with --config.grad_accum_steps=2" in fatal, fatal
        assert "or --config.model.remat=True" in fatal and "a resumed run accepts them" in fatal
        assert "a smaller batch (data.batch_size=16) or model needs a new --workdir" in fatal
        fixes = ("--config.grad_accum_steps=2", "--config.model.remat=True")
    # The fixes it names: the run resumes from step 4 and ends, each step recorded once.
    fixed = tiny_command(workdir, 6, *fixes)
    again = subprocess.run(
        fixed, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-3000:]
    records = (workdir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    steps = [json.loads(r)["step"] for r in records if json.loads(r)["split"] == "train"]
    assert steps == [1, 2, 3, 4, 5, 6], steps


@needs_corpus
def test_an_out_of_memory_in_the_closing_report_names_its_fixes_and_the_rerun_writes_it(
    tmp_path,
):
    """The model is saved when the closing report runs: its loss pass (or decoding) out of
    memory names the eval.* values to lower, and the same command with one writes it."""
    workdir = tmp_path / "run"
    command = tiny_command(workdir, 4, "--config.eval.num_test_examples=8")
    prelude = f"""
        import jax
        from transformer_jax.evaluation import report
        def teacher_forced_loss(*args, **kwargs):
            raise jax.errors.JaxRuntimeError({OOM!r})
        report.teacher_forced_loss = teacher_forced_loss
    """
    fatal = one_fatal_line(run_module_after(prelude, "experiments.train", *command[3:]))
    assert "ran out of memory in the closing test report (XLA: Out of memory" in fatal, fatal
    assert fatal.endswith(
        "The trained model is saved. Re-run the same command with a smaller "
        "--config.eval.decode_batch_size (now 64 sentences), --config.eval.beam_size (now 1) "
        "or, for its loss pass, --config.eval.loss_batch_size (now 16 rows): it writes the "
        "report from the last checkpoint."
    ), fatal
    assert not (workdir / "eval_report.json").exists()
    again = subprocess.run(
        [*command, "--config.eval.loss_batch_size=8"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((workdir / "eval_report.json").read_text(encoding="utf-8"))["loss"] > 0


# XLA's error raised by the decoding itself, in the launcher's own process.
DECODING = """
    import jax
    from transformer_jax.inference import translator
    def translate_detailed(self, *args, **kwargs):  # says the batch size it was given
        raise jax.errors.JaxRuntimeError({oom!r} + f" (batch_size={{kwargs['batch_size']}})")
    translator.Translator.translate_detailed = translate_detailed
"""


@needs_corpus
def test_translate_out_of_memory_is_one_line_and_keeps_the_output_file(tiny_workdir, tmp_path):
    output = tmp_path / "out.txt"
    output.write_text("the old translations\n", encoding="utf-8")
    args = [f"--workdir={tiny_workdir}", "--batch_size=8", f"--output_file={output}", "go ."]
    fatal = one_fatal_line(
        run_module_after(DECODING.format(oom=OOM), "experiments.translate", *args)
    )
    assert fatal.startswith("FATAL: The host (XLA:CPU) ran out of memory translating (XLA: "), fatal
    assert "(3.0 GiB). (batch_size=8))." in fatal, fatal  # --batch_size reached the search
    assert fatal.endswith("Lower --batch_size (now 8 sentences a batch) or --beam_size (now 1)."), (
        fatal
    )
    assert output.read_text(encoding="utf-8") == "the old translations\n"


@needs_corpus
def test_evaluate_out_of_memory_names_its_batch_and_beam(tiny_workdir):
    args = [f"--workdir={tiny_workdir}", "--beam_size=2", "--num_examples=4"]
    # --loss_batch_size given (the run's data.batch_size, 16, otherwise): the line says it.
    result = run_module_after(
        DECODING.format(oom=OOM), "experiments.evaluate", *args, "--loss_batch_size=3"
    )
    fatal = one_fatal_line(result)
    assert "ran out of memory evaluating on test (XLA: Out of memory allocating" in fatal, fatal
    assert "Lower --batch_size (now 64 sentences a decoding batch), --beam_size (now 2)" in fatal
    assert fatal.endswith("or --loss_batch_size (now 3 rows a batch of the loss pass)."), fatal


@needs_corpus
def test_the_loss_is_the_same_at_any_loss_batch_size(tiny_workdir):
    """eval.loss_batch_size (evaluate's --loss_batch_size) changes memory, not the loss: a
    sum over tokens, dummy rows of zero weight filling a last or rounded-up batch."""
    from transformer_jax.data import load_split_pairs
    from transformer_jax.evaluation.report import evaluate_workdir, teacher_forced_loss
    from transformer_jax.inference import Translator

    translator = Translator.from_workdir(tiny_workdir)
    pairs = load_split_pairs(translator.config.data, "test")[:37]
    losses = [teacher_forced_loss(translator, pairs, rows) for rows in (None, 5, 64)]
    # evaluate's --loss_batch_size reaches the loss pass through evaluate_workdir.
    reports = [
        evaluate_workdir(tiny_workdir, num_examples=9, write=False, loss_batch_size=rows)
        for rows in (None, 2)
    ]
    for first, *others in (losses, reports):
        for other in others:
            for key in ("loss", "accuracy"):
                assert other[key] == pytest.approx(first[key], rel=1e-5), (key, first, other)


@needs_corpus
def test_translate_batch_size_changes_no_translation(tiny_workdir):
    lines = ["go .", "i lost my keys .", "", "he is a good person .", "run !"]
    outputs = [
        run_module_after("", "experiments.translate", f"--workdir={tiny_workdir}", *flag, *lines)
        for flag in ([], ["--batch_size=2"])
    ]
    assert all(out.returncode == 0 for out in outputs), outputs[-1].stderr[-2000:]
    assert outputs[0].stdout == outputs[1].stdout and len(outputs[0].stdout.splitlines()) == 5


def test_steps_dispatched_since_the_last_fetch_are_all_named(tmp_path):
    # JAX runs steps ahead of the metrics fetch that raises: steps 3 to 5, or step 3 alone.
    watch = MemoryWatch(fra_eng.get_config(), tmp_path)
    watch.checked(2)
    for last, named in ((5, "at one of steps 3 to 5 (XLA"), (3, "at step 3 (XLA")):
        watch.at("train", last)
        with pytest.raises(device_memory.DeviceMemoryError, match=re.escape(named)):
            with watch.watching():
                raise jax.errors.JaxRuntimeError(OOM)


class WarmUpOutOfMemory:
    """A serving engine whose warm-up meets XLA's error, as for its largest batch."""

    def options(self, given):
        raise AssertionError("no request is served before the warm-up")

    def translate(self, lines, options, line_ids=None):
        raise AssertionError("no request is served before the warm-up")

    def warm_up(self, max_sentences, stop=None):
        raise jax.errors.JaxRuntimeError(OOM)

    def describe(self):
        return {"engine": "warm-up out of memory"}


def test_a_server_warm_up_out_of_memory_names_the_batch_to_lower():
    pytest.importorskip("fastapi")  # the [serve] extra
    from transformer_jax.serving.app import create_app, start_in_thread
    from transformer_jax.serving.requests import Limits

    failures = []
    limits = Limits(max_sentences=4, max_chars=50, max_body_bytes=400, max_beam_size=8)
    app = create_app(
        WarmUpOutOfMemory(),
        limits=limits,
        window_s=0.001,
        max_sentences=16,
        on_failure=failures.append,
    )
    server = start_in_thread(app)
    try:
        deadline = time.monotonic() + 60
        while not failures and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(urllib.error.HTTPError) as health:
            urllib.request.urlopen(f"{server.url}/health", timeout=30)
        answer = json.loads(health.value.read())
    finally:
        server.stop()
    assert failures == [
        "The host (XLA:CPU) ran out of memory warming up (XLA: Out of memory allocating "
        "3221225472 bytes (3.0 GiB)): start the server with a smaller --max_batch_sentences "
        "(now 16 sentences a batch)"
    ], failures
    assert health.value.code == 500 and answer["error"] == failures[0], answer
