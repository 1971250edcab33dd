r"""Serving under load: requests/s, sentences/s and latency of the HTTP server at 1, 8, 64 clients.

    python -m benchmarks.serve --workdir=runs/fra_eng
    python -m benchmarks.serve --workdir=runs/fra_eng --clients=1,8,64 --requests=512 \
        --out=serve.json
    python -m benchmarks.serve --model_dir=exports/fra_eng_ct2     # the CTranslate2 engine

Starts `python -m experiments.serve` on the workdir (127.0.0.1, a free port; --server_flag
passes more flags, e.g. --server_flag=--beam_size=1), waits until /health answers 200 (the
warm-up compiles the decoding programs), then for each --clients level sends --requests
`POST /translate` requests of --sentences_per_request sentences from that many client
threads (each with its own keep-alive connection; a client sends its next request when the
last is answered) and prints one row per level: requests/s, sentences/s, p50/p99 latency,
the mean batch the server decoded (from /health's counts), the speed-up in sentences/s
over the first level and the programs the server compiled during the level (the JAX
engine's count; each one a latency spike a warm-up would have spared). The clients run in
this process, on the same machine as the server: their own CPU time counts against the
server's. --out writes the rows as JSON.

Sentences are `SENTENCES` (English, 1-12 words, as the fra-eng test split), cycled, or those
of --sentences_file (one a line).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

from absl import app, flags

from benchmarks.serve_clients import (
    get_json,
    load_level,
    read_sentences,
    start_server,
    stop_server,
    wait_healthy,
)
from transformer_jax import launch

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Training workdir the server loads (the JAX engine).")
flags.DEFINE_string(
    "model_dir", None, "Instead of --workdir: a CTranslate2 export (--engine=ctranslate2)."
)
flags.DEFINE_list("clients", ["1", "8", "64"], "Concurrent clients, one level each.")
flags.DEFINE_integer("requests", 512, "Requests per level (split over its clients).")
flags.DEFINE_integer("sentences_per_request", 1, "Sentences in each request.")
flags.DEFINE_integer("beam_size", None, "Sent with each request; default the server's.")
flags.DEFINE_float("batch_window_ms", None, "The server's --batch_window_ms (None: its default).")
flags.DEFINE_integer("max_batch_sentences", 64, "The server's --max_batch_sentences.")
flags.DEFINE_multi_string("server_flag", [], "More flags for experiments.serve.")
flags.DEFINE_integer("startup_timeout", 900, "Seconds to wait for /health to answer 200.")
flags.DEFINE_string("out", None, "Write the rows as JSON here.")
flags.DEFINE_string(
    "sentences_file",
    None,
    "Sentences to send, one a line (e.g. English lines of the corpus, long tail and all); "
    "default `SENTENCES`.",
)


def table(rows: list[dict]) -> str:
    base = rows[0]["sentences_per_s"]
    lines = [
        "| clients | requests | req/s | sentences/s | p50 ms | p99 ms | mean batch | speed-up "
        "| compiled |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        compiled = "-" if r["compiled_programs"] is None else r["compiled_programs"]
        lines.append(
            f"| {r['clients']} | {r['requests']} | {r['requests_per_s']:.1f} | "
            f"{r['sentences_per_s']:.1f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | "
            f"{r['mean_batch']:.1f} | {r['sentences_per_s'] / base:.2f}x | {compiled} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    levels = [int(c) for c in FLAGS.clients]
    if min(levels) < 1 or FLAGS.requests < 1 or FLAGS.sentences_per_request < 1:
        launch.fatal("--clients, --requests and --sentences_per_request must be >= 1.")
    extra = [
        *(
            [f"--batch_window_ms={FLAGS.batch_window_ms}"]
            if FLAGS.batch_window_ms is not None
            else []
        ),
        f"--max_batch_sentences={FLAGS.max_batch_sentences}",
        f"--max_request_sentences={max(64, FLAGS.sentences_per_request)}",
        *FLAGS.server_flag,
    ]
    if bool(FLAGS.workdir) == bool(FLAGS.model_dir):
        launch.fatal("give --workdir (a training run) or --model_dir (a CTranslate2 export).")
    sentences = read_sentences(FLAGS.sentences_file)
    model = [f"--workdir={FLAGS.workdir}"]
    if FLAGS.model_dir:
        model = ["--engine=ctranslate2", f"--model_dir={FLAGS.model_dir}"]
    process, url = start_server(model, extra, FLAGS.startup_timeout)
    try:
        warm = wait_healthy(url, process, FLAGS.startup_timeout)
        health = get_json(url, "/health")[1]
        print(f"server {url}: ready after {warm:.1f} s of warm-up; {health}", flush=True)
        body = {} if FLAGS.beam_size is None else {"beam_size": FLAGS.beam_size}
        rows = []
        for clients in levels:
            per_request = FLAGS.sentences_per_request
            rows.append(load_level(url, clients, FLAGS.requests, body, per_request, sentences))
            print(f"{clients} clients: {rows[-1]['sentences_per_s']:.1f} sentences/s", flush=True)
    finally:
        stop_server(process)
    print(table(rows))
    if FLAGS.out:
        result = {
            "workdir": FLAGS.workdir,
            "model_dir": FLAGS.model_dir,
            "server": {
                k: v for k, v in health.items() if k not in ("batches", "batched_sentences")
            },
            "warm_up_s": warm,
            "cpu": platform.processor() or platform.machine(),
            "flags": extra,
            "rows": rows,
        }
        Path(FLAGS.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    app.run(main, flags_parser=launch.flags_parser())
