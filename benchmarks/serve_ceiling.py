r"""What batching can give the server on this machine: the engine alone, the HTTP path alone.

    python -m benchmarks.serve_ceiling --workdir=runs/fra_eng
    python -m benchmarks.serve_ceiling --model_dir=exports/fra_eng_ct2    # CTranslate2
    python -m benchmarks.serve_ceiling --workdir=runs/fra_eng --sentences_file=lines.txt

`benchmarks.serve` measures the server's speed-up at 64 clients over one. This measures what
that speed-up is made of, each part without the others, on the same sentences:

- **the engine alone**, in this process: sentences/s of the server's own call
  (`engine.translate`, the server's --cpu_devices) one sentence at a time and in batches of
  each --clients level (at most --max_batch_sentences), each batch decoded once untimed first
  (its programs compiled, as the server's warm-up does);
- **the HTTP path alone**: the server's app, batcher and uvicorn in a subprocess over an
  engine that decodes nothing (it echoes each line), loaded by `benchmarks.serve`'s clients
  (threads of this process) at each level;
- **the server's one client** (`experiments.serve`, warmed up for one-sentence batches,
  then every sentence sent once untimed; --noserver: not measured).

At n clients the server decodes batches of at most n sentences, so it cannot beat the engine
alone at that batch: `most speed-up` is that rate over the server's one-client rate, the
ceiling of `benchmarks.serve`'s speed-up column, whatever the batching. A client also waits
for HTTP, and at many clients the HTTP work shares the cores: `both` estimates each level as
1 / (1/engine + 1/http) sentences/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.serve_clients import (
    SENTENCES,
    load_level,
    read_sentences,
    start_python,
    start_server,
    stop_server,
    wait_healthy,
)
from transformer_jax import launch
from transformer_jax.runtime import cpu_devices

# The server's defaults (experiments.serve): a 5 ms window, adaptive batching.
WINDOW_S = 0.005


class EchoEngine:
    """The server's engine interface (`serving.app.create_app`) without a model: each line's
    translation is the line itself."""

    name = "echo"

    def __init__(self):
        from transformer_jax.serving.requests import decode_options

        self._decode_options = decode_options
        self.default_options = decode_options({}, {})

    def options(self, given: dict[str, Any]) -> Any:
        return self._decode_options(dataclasses.asdict(self.default_options), given)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name}

    def translate(self, lines: Sequence[str], options: Any, line_ids: Any = None) -> list:
        del options, line_ids
        return [[{"text": line}] for line in lines]

    def warm_up(self, max_sentences: int, stop: Any = None) -> int:
        del max_sentences, stop
        return 0


def serve_echo(max_sentences: int) -> None:
    """The real app over `EchoEngine` on a free port of 127.0.0.1, until SIGINT/SIGTERM (the
    subprocess of `http_rates`)."""
    from transformer_jax.serving.app import bind, create_app, serve
    from transformer_jax.serving.requests import Limits

    server_app = create_app(
        EchoEngine(),
        limits=Limits(max_sentences=max(64, max_sentences)),
        window_s=WINDOW_S,
        adaptive=True,
        max_sentences=max_sentences,
        warm_up=False,
    )
    serve(server_app, bind("127.0.0.1", 0))


def open_engine(
    workdir: str | None, model_dir: str | None, beam_size: int | None, devices: int
) -> Any:
    """The engine `experiments.serve` loads (its defaults, the beam as given; `devices` CPU
    devices for JAX, its --cpu_devices)."""
    from transformer_jax.serving.engines import CTranslate2Engine, JaxEngine

    if model_dir:
        return CTranslate2Engine(model_dir, beam_size=beam_size)
    from transformer_jax.inference import load_translator
    from transformer_jax.runtime import configure_process
    from transformer_jax.workdir.checkpoints import load_config

    configure_process(load_config(workdir))
    cpu_devices.apply(devices)
    launch.start_backend()
    return JaxEngine(load_translator(workdir, None, average_last=1), beam_size=beam_size)


def engine_rate(engine: Any, sentences: list[str], batch: int) -> float:
    """Sentences/s of `engine.translate` over `sentences` in calls of `batch` lines, each call
    made once untimed first (its programs compiled)."""
    calls = [sentences[i : i + batch] for i in range(0, len(sentences), batch)]
    options = engine.default_options
    for lines in dict.fromkeys(tuple(c) for c in calls):
        engine.translate(list(lines), options)
    start = time.perf_counter()
    for lines in calls:
        engine.translate(lines, options)
    return len(sentences) / (time.perf_counter() - start)


def http_rates(levels: list[int], requests: int, max_sentences: int) -> list[float]:
    """Sentences/s (one a request) of the echo server at each level of clients."""
    code = f"from benchmarks.serve_ceiling import serve_echo; serve_echo({max_sentences})"
    process, url = start_python(["-c", code], timeout=120)
    try:
        wait_healthy(url, process, timeout=60)
        return [load_level(url, c, requests, {}, 1, SENTENCES)["sentences_per_s"] for c in levels]
    finally:
        stop_server(process)


def server_one_client(
    model: list[str], beam_size: int | None, sentences: list[str], timeout: float
) -> float:
    """Sentences/s of `experiments.serve` (its flags `model`) to one client sending
    `sentences` one a request; `timeout`: seconds for its warm-up."""
    extra = ["--max_batch_sentences=1"]
    if beam_size is not None:
        extra.append(f"--beam_size={beam_size}")
    process, url = start_server(model, extra, timeout)
    try:
        wait_healthy(url, process, timeout)
        body = {} if beam_size is None else {"beam_size": beam_size}
        # Once untimed first, as the engine's: a line of several sentences is decoded as a
        # batch of its sentences, which a one-sentence server's warm-up did not compile.
        load_level(url, 1, len(sentences), body, 1, sentences)
        return load_level(url, 1, len(sentences), body, 1, sentences)["sentences_per_s"]
    finally:
        stop_server(process)


def combined(engine: float, http: float) -> float:
    """Sentences/s when each sentence costs both (a client waits for both; many share cores)."""
    return 1 / (1 / engine + 1 / http)


def table(
    levels: list[int],
    batches: list[int],
    engine: list[float],
    http: list[float],
    one_client: float | None,
) -> str:
    """One row per level; `most speed-up` is the engine at that batch over `one_client` (the
    server's one-client sentences/s; None: not measured)."""
    lines = [
        "| clients | batch | engine alone, sentences/s | HTTP alone (echo), sentences/s "
        "| both, estimated | most speed-up over the server's 1 client |",
        "|---|---|---|---|---|---|",
    ]
    for clients, batch, e, h in zip(levels, batches, engine, http, strict=True):
        most = "not measured" if one_client is None else f"{e / one_client:.2f}x"
        lines.append(f"| {clients} | {batch} | {e:.1f} | {h:.1f} | {combined(e, h):.1f} | {most} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    # argparse, not absl flags: importing this module (as its tests do) defines no flags.
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", help="Training workdir (the JAX engine).")
    parser.add_argument("--model_dir", help="Instead of --workdir: a CTranslate2 export.")
    parser.add_argument(
        "--clients", default="1,8,64", help="Levels, comma-separated: clients and batch sizes."
    )
    parser.add_argument(
        "--sentences", type=int, default=512, help="Sentences (and requests) timed per level."
    )
    parser.add_argument(
        "--max_batch_sentences", type=int, default=64, help="The server's --max_batch_sentences."
    )
    parser.add_argument("--beam_size", type=int, help="Beam width; default the run's.")
    parser.add_argument(
        "--cpu_devices",
        type=int,
        default=cpu_devices.local_cores(),
        help="The server's --cpu_devices (the JAX engine); default one per core.",
    )
    parser.add_argument("--sentences_file", help="Sentences, one a line; default `SENTENCES`.")
    parser.add_argument(
        "--noserver", action="store_true", help="Do not measure the real server's one client."
    )
    parser.add_argument(
        "--startup_timeout", type=float, default=900, help="Seconds for the server's warm-up."
    )
    args = parser.parse_args(argv)
    try:
        args.clients = [int(c) for c in args.clients.split(",")]
    except ValueError:
        parser.error(f"--clients={args.clients}: give whole numbers, comma-separated.")
    if min(args.clients) < 1 or args.sentences < 1 or args.max_batch_sentences < 1:
        parser.error("--clients, --sentences and --max_batch_sentences must be >= 1.")
    if bool(args.workdir) == bool(args.model_dir):
        parser.error("give --workdir (a training run) or --model_dir (a CTranslate2 export).")
    for name in ("workdir", "model_dir", "sentences_file"):  # ~ after "=" is not expanded
        if getattr(args, name):
            setattr(args, name, str(Path(getattr(args, name)).expanduser()))
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    launch.quiet_library_logs()
    sentences = read_sentences(args.sentences_file)
    sentences = [sentences[i % len(sentences)] for i in range(args.sentences)]
    try:
        engine = open_engine(args.workdir, args.model_dir, args.beam_size, args.cpu_devices)
    except (FileNotFoundError, ValueError) as error:  # not a run or an export: their reasons
        launch.fatal(str(error))
    batches = [min(clients, args.max_batch_sentences) for clients in args.clients]
    rates = []
    for batch in batches:
        rates.append(engine_rate(engine, sentences, batch))
        print(f"engine alone, batches of {batch}: {rates[-1]:.1f} sentences/s", flush=True)
    del engine  # the server's cores are its own from here
    http = http_rates(args.clients, args.sentences, args.max_batch_sentences)
    print("HTTP alone (echo): " + ", ".join(f"{h:.1f}" for h in http) + " sentences/s")
    one_client = None
    if not args.noserver:
        model = [f"--workdir={args.workdir}", f"--cpu_devices={args.cpu_devices}"]
        if args.model_dir:
            model = ["--engine=ctranslate2", f"--model_dir={args.model_dir}"]
        one_client = server_one_client(model, args.beam_size, sentences, args.startup_timeout)
        print(f"the server's one client: {one_client:.1f} sentences/s", flush=True)
    print(table(args.clients, batches, rates, http, one_client))


if __name__ == "__main__":
    main()
