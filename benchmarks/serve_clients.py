"""The load-test clients of the serving benchmarks (`benchmarks.serve`,
`benchmarks.serve_ceiling`): a server subprocess's URL, its health, and one level of
concurrent clients. No flags: each benchmark defines its own."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from transformer_jax import launch

REPO = Path(__file__).resolve().parents[1]

# English, 1-12 words, as the fra-eng test split.
SENTENCES = [
    "Go.",
    "I lost.",
    "Help me.",
    "Tom is tall.",
    "I'm at home.",
    "Where is the station?",
    "I like to read books.",
    "She is my best friend.",
    "We have to leave now.",
    "Do you speak French?",
    "It's raining outside today.",
    "I don't know what to do.",
    "He went to school by bus.",
    "The children are playing in the garden.",
    "Can you tell me where the nearest bank is?",
    "I think that Tom is right about this.",
    "My father bought a new car last week.",
    "Please close the door when you leave the room.",
    "I've never seen such a beautiful sunset before.",
    "They said they would come back tomorrow morning.",
]


def get_json(url: str, path: str) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def wait_healthy(url: str, process: subprocess.Popen, timeout: float) -> float:
    """Seconds until GET /health answered 200."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process.poll() is not None:
            launch.fatal(f"the server ended (exit code {process.returncode}) while warming up.")
        try:
            if get_json(url, "/health")[0] == 200:
                return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.5)
    launch.fatal(f"the server did not answer /health with 200 within {timeout:.0f} s.")


def load_level(
    url: str,
    clients: int,
    requests: int,
    body: dict,
    per_request: int,
    sentences: list[str] = SENTENCES,
) -> dict:
    """`requests` POST /translate from `clients` threads, of `sentences` cycled; wall time
    and each latency."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    latencies: list[float] = []
    errors: list[str] = []
    counter = iter(range(requests))
    lock = threading.Lock()

    def client() -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            text = [sentences[(i * per_request + k) % len(sentences)] for k in range(per_request)]
            payload = json.dumps({**body, "text": text}).encode()
            start = time.perf_counter()
            connection.request("POST", "/translate", payload, {"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
            elapsed = time.perf_counter() - start
            with lock:
                if response.status == 200 and len(json.loads(data)["translations"]) == per_request:
                    latencies.append(elapsed)
                else:
                    errors.append(f"{response.status} {data[:200]!r}")
        connection.close()

    before = get_json(url, "/health")[1]
    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    after = get_json(url, "/health")[1]
    if errors:
        launch.fatal(f"{len(errors)} of {requests} requests failed, e.g. {errors[0]}")
    batches = after["batches"] - before["batches"]
    # Programs the server compiled during this level (the JAX engine counts them): each a
    # latency spike that a warmed server would not have had.
    compiled = None
    if "compiled_while_serving" in after:
        compiled = (
            after["compiled_while_serving"]["programs"]
            - before["compiled_while_serving"]["programs"]
        )
    sentences = after["batched_sentences"] - before["batched_sentences"]
    return {
        "clients": clients,
        "requests": requests,
        "sentences": requests * per_request,
        "seconds": wall,
        "requests_per_s": requests / wall,
        "sentences_per_s": requests * per_request / wall,
        "p50_ms": 1000 * float(np.percentile(latencies, 50)),
        "p99_ms": 1000 * float(np.percentile(latencies, 99)),
        "mean_batch": sentences / max(batches, 1),
        "compiled_programs": compiled,
    }


def listening_url(process: subprocess.Popen, timeout: float) -> str:
    """The URL a server subprocess (started with stderr=PIPE, text) prints in its "Serving on"
    line; keeps reading its stderr after, so that it never blocks on a full pipe. A server
    that ends or stays silent first ends this with its FATAL line (or its last lines)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    for line in process.stderr:
        lines.append(line)
        found = re.search(r"Serving on (http://\S+)", line)
        if found:
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return found.group(1)
        if time.monotonic() > deadline:
            break
    process.kill()
    process.wait()
    fatal = [line for line in lines if line.startswith("FATAL: ")]
    launch.fatal(fatal[-1][len("FATAL: ") :] if fatal else "".join(lines[-5:]))


def start_server(
    model: list[str], extra: list[str], timeout: float
) -> tuple[subprocess.Popen, str]:
    """`experiments.serve` of `model` (its flags: ["--workdir=..."], or the CTranslate2
    engine's) on a free port; returns the process and its URL once it listens. A server that
    ends first (e.g. a directory without a run) ends this with its FATAL line."""
    return start_python(["-m", "experiments.serve", *model, "--port=0", *extra], timeout)


def start_python(args: list[str], timeout: float) -> tuple[subprocess.Popen, str]:
    """`python *args` from the repository, a server that prints "Serving on <url>" on stderr;
    returns the process and its URL once it listens (`listening_url`)."""
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},  # its log, read here as UTF-8
        encoding="utf-8",
        errors="replace",
    )
    return process, listening_url(process, timeout)


def read_sentences(path: str | None) -> list[str]:
    """The non-blank lines of `path` (UTF-8), stripped; `SENTENCES` for None. A file with
    none is one FATAL line."""
    if path is None:
        return SENTENCES
    text = Path(path).read_text(encoding="utf-8")
    sentences = [line.strip() for line in text.splitlines() if line.strip()]
    if not sentences:
        launch.fatal(f"--sentences_file={path} holds no sentence.")
    return sentences


def stop_server(process: subprocess.Popen) -> None:
    """SIGINT (the server shuts down gracefully), then a kill if it has not ended in 30 s."""
    process.send_signal(2)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
