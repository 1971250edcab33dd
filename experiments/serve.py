r"""Serve translations over HTTP/JSON: flags in, `serving.app.serve` out.

    python -m experiments.serve --workdir=runs/fra_eng --port=8000
    python -m experiments.serve --engine=ctranslate2 --model_dir=exports/fra_eng_ct2
    curl -s localhost:8000/translate -d '{"text": ["Go.", "I lost."], "beam_size": 4}'
    # {"translations":["Va !","J'ai perdu."]}

The model is loaded once; GET /health answers 503 while its decoding programs compile (tens
of seconds on a CPU) and 200 after. On a CPU, batches are split over one XLA:CPU device
per core (--cpu_devices; 0: JAX's single device). Requests that arrive within
--batch_window_ms of each other (up to --max_batch_sentences sentences; adaptive batching
closes a batch once as many requests as there were clients are in) are decoded as one batch.
The decoding flags (--beam_size, --alpha, ...; unset: the run's) are the defaults a request
can override. WORKSPACE.md ("Serve over HTTP") lists the request fields and limits. Needs
the `[serve]` extra (FastAPI, uvicorn): `pip install 'transformer_jax[serve]'`.
"""

from __future__ import annotations

import importlib.util

from absl import app, flags

from transformer_jax import launch
from transformer_jax.runtime import cpu_devices

FLAGS = flags.FLAGS
launch.define_decoding_flags()  # --workdir, --step, --beam_size, ... (as translate's)
launch.define_compilation_cache_flag()  # --compilation_cache_dir (as train's)
# A server decodes batches of many requests: one CPU device per core (translate's default is
# JAX's one device). On 2 cores, 8 clients got 276-292 sentences/s with 2 devices, 241 with
# one (benchmarks/README.md, "Speed"); a batch too small to gain decodes on one anyway.
FLAGS.set_default("cpu_devices", cpu_devices.local_cores())
# The longest a batch gathers (serving/batcher.py; benchmarks/README.md, "Speed").
WINDOW_MS = 5.0
flags.DEFINE_enum(
    "engine",
    "jax",
    ["jax", "ctranslate2"],
    "jax: the checkpoint in --workdir; ctranslate2: the CTranslate2 export in --model_dir.",
)
flags.DEFINE_string("model_dir", None, "CTranslate2 export directory (--engine=ctranslate2).")
flags.DEFINE_enum(
    "text",
    "natural",
    ["natural", "data"],
    "natural: translations as text to read; data: the model's own form (as translate's --text).",
)
flags.DEFINE_string("host", "127.0.0.1", "Address to listen on (0.0.0.0: every interface).")
flags.DEFINE_integer("port", 8000, "Port to listen on; 0 = a free one (printed on stderr).")
flags.DEFINE_float(
    "batch_window_ms",
    WINDOW_MS,
    "The longest the batcher gathers requests after the first of a batch, in milliseconds.",
)
flags.DEFINE_bool(
    "adaptive_batching",
    True,
    "Close a batch early once it holds as many requests as there were clients when the last "
    "one ended (a lone client waits no window); --noadaptive_batching: always gather for "
    "--batch_window_ms.",
)
flags.DEFINE_integer("max_batch_sentences", 64, "Most sentences decoded as one batch.")
flags.DEFINE_integer("max_request_sentences", 64, "Most sentences in one request (400 above).")
flags.DEFINE_integer("max_sentence_chars", 1000, "Most characters in one sentence (400 above).")
flags.DEFINE_integer("max_body_bytes", 1 << 20, "Most bytes in a request body (413 above).")
flags.DEFINE_integer("max_beam_size", 16, "Largest beam_size a request may ask for.")
flags.DEFINE_bool("warm_up", True, "Compile the decoding programs before /health answers 200.")
flags.DEFINE_list(
    "warm_up_beam_sizes",
    [],
    "More beam sizes the warm-up compiles for (the default options' always), e.g. 1 when "
    "greedy requests come to a beam-4 server: unwarmed, each new batch shape compiles on first "
    "use (seconds); each adds about the default's warm-up time.",
)
flags.DEFINE_integer(
    "warm_up_threads",
    0,
    "Decoding programs the warm-up compiles at once (0: one per host core, at most 8, but one "
    "under host_memory='reuse', the CPU default, whose one malloc arena makes them wait on "
    "each other; 1: one after another).",
)
flags.DEFINE_bool("access_log", False, "Log one line per request (uvicorn's access log).")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        launch.fatal(f"unexpected arguments {argv[1:]}; the server takes flags only.")
    launch.quiet_library_logs()  # orbax's routine INFO and read-only notices
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        launch.fatal(
            "serving needs FastAPI and uvicorn: pip install 'transformer_jax[serve]' "
            "(or pip install -r requirements.txt)."
        )
    # The [serve] extra's modules, imported once the check above has passed.
    from transformer_jax.serving.app import bind, create_app, serve
    from transformer_jax.serving.requests import Limits

    try:
        limits = Limits(
            max_sentences=FLAGS.max_request_sentences,
            max_chars=FLAGS.max_sentence_chars,
            max_body_bytes=FLAGS.max_body_bytes,
            max_beam_size=FLAGS.max_beam_size,
        )
        if FLAGS.max_batch_sentences < 1 or FLAGS.batch_window_ms < 0:
            raise ValueError("--max_batch_sentences must be >= 1 and --batch_window_ms >= 0.")
        if FLAGS.warm_up_threads < 0:
            raise ValueError(
                f"--warm_up_threads={FLAGS.warm_up_threads}: give a whole number >= 0 (0: one "
                "per host core; 1: one program at a time)."
            )
        sock = bind(FLAGS.host, FLAGS.port)  # first: a taken port fails before the model loads
        engine = _engine()
    except (ImportError, OSError, ValueError) as error:  # ImportError: the [export] extra
        launch.fatal(str(error))
    failures: list[str] = []

    def stop(reason: str) -> None:  # the warm-up failed: stop serving, then one FATAL line
        failures.append(reason)
        server_app.state.server.should_exit = True

    server_app = create_app(
        engine,
        limits=limits,
        window_s=FLAGS.batch_window_ms / 1000,
        adaptive=FLAGS.adaptive_batching,
        max_sentences=FLAGS.max_batch_sentences,
        warm_up=FLAGS.warm_up,
        on_failure=stop,
    )
    serve(server_app, sock, access_log=FLAGS.access_log)
    if failures:
        launch.fatal(failures[0])


def _engine():
    """The engine the flags name, loaded (a FATAL line if it cannot be)."""
    from transformer_jax.serving.engines import CTranslate2Engine, JaxEngine

    if FLAGS.engine == "ctranslate2":
        if not FLAGS.model_dir:
            launch.fatal(f"--model_dir is missing: {FLAGS['model_dir'].help}")
        if "," in FLAGS.model_dir or "," in (FLAGS.workdir or ""):  # several models
            from transformer_jax.export.ct2_translate import ENSEMBLE_ERROR

            launch.fatal(f"{ENSEMBLE_ERROR}.")
        unsupported = [
            f"--{name}" for name in ("workdir", "step", "max_decode_len") if FLAGS[name].value
        ]
        if FLAGS.average_last != 1:
            unsupported.append("--average_last")
        if unsupported:
            launch.fatal(
                f"{', '.join(unsupported)} apply to --engine=jax only; a CTranslate2 export "
                "holds one set of weights (export an averaged or earlier checkpoint instead)."
            )
        # The decoding options' flags (--nbest, --temperature, ...) are request defaults too.
        values = {**launch.decoding_flag_values(), **launch.decoding_option_values()}
        for name in ("step", "average_last", "max_decode_len"):  # refused above
            values.pop(name)
        try:
            return CTranslate2Engine(FLAGS.model_dir, text=FLAGS.text, **values)
        except ValueError as error:  # not an export, or a damaged one (DamagedExportError)
            launch.fatal(str(error))
    if not FLAGS.workdir:
        launch.fatal(f"--workdir is missing: {FLAGS['workdir'].help}")
    from transformer_jax.evaluation.translate_cli import first_workdir
    from transformer_jax.inference import load_translator
    from transformer_jax.runtime import configure_process
    from transformer_jax.workdir.checkpoints import NoCheckpointError, load_config

    try:
        # The (first) run's process settings (XLA flags, allocator) before JAX starts.
        configure_process(load_config(first_workdir(FLAGS.workdir)))
        cpu_devices.apply(FLAGS.cpu_devices)
        launch.use_compilation_cache(FLAGS.compilation_cache_dir)
        launch.start_backend()
        # The decoding options' flags (--nbest, --temperature, ...) are request defaults too.
        values = {**launch.decoding_flag_values(), **launch.decoding_option_values()}
        # --workdir=a,b@STEP: an ensemble (inference.load_translator).
        translator = load_translator(
            FLAGS.workdir, values.pop("step"), average_last=values.pop("average_last")
        )
    except (NoCheckpointError, ValueError) as error:
        launch.fatal(str(error))
    try:
        beams = [int(b) for b in FLAGS.warm_up_beam_sizes]
        if any(b > FLAGS.max_beam_size for b in beams):
            raise ValueError(f"--max_beam_size is {FLAGS.max_beam_size}")
    except ValueError as error:
        launch.fatal(
            f"--warm_up_beam_sizes={','.join(FLAGS.warm_up_beam_sizes)}: give whole numbers from "
            f"1 to --max_beam_size, comma-separated ({error})."
        )
    try:
        threads = FLAGS.warm_up_threads or None  # 0: the default
        return JaxEngine(
            translator,
            text=FLAGS.text,
            warm_up_beam_sizes=beams,
            warm_up_threads=threads,
            **values,
        )
    except ValueError as error:
        launch.fatal(str(error))


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    app.run(main, flags_parser=launch.flags_parser())


if __name__ == "__main__":
    run()
