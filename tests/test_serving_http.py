"""The HTTP server for real: uvicorn on 127.0.0.1 (a free port), spoken to over HTTP.

A fake engine for the request handling (fast, and its calls can be counted and held), a
`Translator` of a tiny random model for the real path, and `python -m experiments.serve` on
a tiny trained workdir for the launcher.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import jax
import pytest

pytest.importorskip("fastapi")  # the [serve] extra (pinned in requirements.txt)

from tests.helpers import REPO, serving_translator, subprocess_env  # noqa: E402
from transformer_jax.data.config import SHARED_ZIP  # noqa: E402
from transformer_jax.decoding.options import DecodeOptions  # noqa: E402
from transformer_jax.serving.app import bind, create_app, start_in_thread  # noqa: E402
from transformer_jax.serving.engines import JaxEngine  # noqa: E402
from transformer_jax.serving.requests import Limits, decode_options  # noqa: E402


def request(url, method, path, body=None, headers=None):
    """(status, parsed JSON) of one request; `body` bytes are sent as they are."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        if isinstance(body, dict | list):
            body = json.dumps(body).encode()
        connection.request(method, path, body, headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def wait_healthy(url, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, answer = request(url, "GET", "/health")
        if status == 200:
            return answer
        time.sleep(0.05)
    raise AssertionError(f"/health never answered 200: {status} {answer}")


class FakeEngine:
    """Echoes each line upper-cased (and the beam size); counts calls; warm-up waits for
    `warmed` so a test sees the server before it is ready."""

    def __init__(self, warm: bool = True):
        self.calls: list[list[str]] = []
        self.warmed = threading.Event()
        if warm:
            self.warmed.set()

    def options(self, given):
        return decode_options({"beam_size": 2}, given)

    def translate(self, lines, options, line_ids=None):
        self.calls.append(list(lines))
        if any("explode" in line for line in lines):
            raise RuntimeError("the engine exploded")
        if any("too many" in line for line in lines):  # XLA's words for a batch too large
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 9 bytes")
        return [[{"text": f"{line.upper()} b{options.beam_size}"}] for line in lines]

    def warm_up(self, max_sentences, stop=None):
        assert self.warmed.wait(60)
        return 0

    def describe(self):
        return {"engine": "fake"}


LIMITS = Limits(max_sentences=4, max_chars=50, max_body_bytes=400, max_beam_size=8)


@pytest.fixture
def fake_server():
    engine = FakeEngine()
    app = create_app(engine, limits=LIMITS, window_s=0.001, max_sentences=16)
    server = start_in_thread(app)
    wait_healthy(server.url)
    yield server.url, engine
    server.stop()


def test_health_is_503_until_warm_then_200_and_translate_waits_too():
    engine = FakeEngine(warm=False)
    server = start_in_thread(create_app(engine, limits=LIMITS, window_s=0.001, max_sentences=4))
    try:
        assert request(server.url, "GET", "/health") == (503, {"status": "warming up"})
        status, answer = request(server.url, "POST", "/translate", {"text": "go ."})
        assert status == 503 and "still loading" in answer["error"]
        engine.warmed.set()
        health = wait_healthy(server.url)
        assert health["status"] == "ok" and health["engine"] == "fake"
        assert request(server.url, "POST", "/translate", {"text": "go ."}) == (
            200,
            {"translations": ["GO . b2"]},
        )
    finally:
        server.stop()


def test_translations_come_back_in_order_with_the_requests_options(fake_server):
    url, _ = fake_server
    status, answer = request(url, "POST", "/translate", {"text": ["a", "b", "c"], "beam_size": 3})
    assert (status, answer) == (200, {"translations": ["A b3", "B b3", "C b3"]})


BAD = [
    (b'{"text": ["a"', 400, "invalid JSON"),
    (b'{"text": "\xe9t\xe9"}', 400, "not valid UTF-8 (byte 10)"),
    (b'{"text": "a", "alpha": Infinity}', 400, "Infinity is not a JSON number"),
    ({"text": 5}, 400, '"text" must be a string or a list of strings'),
    ({"text": [""]}, 400, '"text"[0] is empty'),
    ({"text": []}, 400, '"text" is an empty list'),
    ({"text": "x" * 51}, 400, "more than 50"),
    ({"text": ["a"] * 5}, 400, "more than 4 per request"),
    ({"text": "a", "beem_size": 2}, 400, "did you mean 'beam_size'?"),
    ({"text": "a", "beam_size": 1.5}, 400, "beam_size must be an integer >= 1"),
    ({"text": "a", "beam_size": 9}, 400, "over the server's limit of 8"),
    ({"text": "a", "nbest": 3}, 400, "nbest=3 is more than beam_size=2"),
    ({"text": "a" * 30, "alpha": [0.6] * 100}, 413, "over the server's limit of 400 bytes"),
    ({"text": "explode"}, 500, "decoding failed: RuntimeError: the engine exploded"),
    (
        {"text": ["a", "too many"]},
        503,
        "ran out of memory decoding a batch (XLA: Out of memory allocating 9 bytes); this request "
        "had 2 line(s): send fewer lines a request, or start the server with a smaller "
        "--max_batch_sentences.",
    ),
]


@pytest.mark.parametrize("body, status, reason", BAD, ids=[r for _, _, r in BAD])
def test_each_bad_request_gets_its_status_and_one_line_and_the_server_stays_up(
    fake_server, body, status, reason
):
    url, _ = fake_server
    got, answer = request(url, "POST", "/translate", body)
    assert got == status and list(answer) == ["error"], answer
    assert reason in answer["error"] and "\n" not in answer["error"], answer
    assert request(url, "GET", "/health")[0] == 200
    assert request(url, "POST", "/translate", {"text": "ok"}) == (200, {"translations": ["OK b2"]})


def test_text_that_is_not_unicode_or_nested_too_deeply_is_a_400_not_a_500():
    """A lone surrogate (valid JSON) and 100,000 nested "[" once reached the engine or the
    parser's recursion limit: a 500 (a plain-text one for the nesting)."""
    engine = FakeEngine()
    limits = Limits(max_sentences=4, max_chars=50, max_body_bytes=1 << 20)
    server = start_in_thread(create_app(engine, limits=limits, window_s=0.001, max_sentences=4))
    try:
        wait_healthy(server.url)
        for body, reason in [
            (b'{"text": ["bad \\ud800 here"]}', '"text"[0] is not valid Unicode'),
            (b"[" * 100_000, "nested too deeply"),
            ({"text": "\x1b[31m"}, '"text"[0] is empty'),
            ({"text": "\u200b"}, '"text"[0] is empty'),
        ]:
            status, answer = request(server.url, "POST", "/translate", body)
            assert status == 400 and reason in answer["error"], (body[:40], answer)
        assert engine.calls == []
    finally:
        server.stop()


def test_a_body_over_the_limit_is_413_from_the_stream_without_content_length(fake_server):
    url, _ = fake_server
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    chunks = [b'{"text": "' + b"a" * 300, b"b" * 300 + b'"}']
    connection.request("POST", "/translate", iter(chunks), encode_chunked=True)  # no length
    response = connection.getresponse()
    assert response.status == 413 and "400 bytes" in json.loads(response.read())["error"]
    connection.close()
    assert request(url, "GET", "/health")[0] == 200


def test_unknown_routes_and_methods_answer_one_line(fake_server):
    url, _ = fake_server
    assert request(url, "GET", "/nothing") == (404, {"error": "Not Found"})
    assert request(url, "GET", "/translate") == (405, {"error": "Method Not Allowed"})


def test_concurrent_requests_are_decoded_as_one_batch_in_order():
    engine = FakeEngine()
    app = create_app(engine, limits=LIMITS, window_s=2.0, max_sentences=12)  # 12 lines: full
    server = start_in_thread(app)
    try:
        wait_healthy(server.url)
        answers = [None] * 6

        def client(i):
            answers[i] = request(server.url, "POST", "/translate", {"text": [f"s{i}", f"t{i}"]})

        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert answers == [(200, {"translations": [f"S{i} b2", f"T{i} b2"]}) for i in range(6)]
        assert len(engine.calls) == 1 and sorted(engine.calls[0]) == sorted(
            f"{c}{i}" for i in range(6) for c in "st"
        )
        health = request(server.url, "GET", "/health")[1]
        assert (health["batches"], health["batched_sentences"]) == (1, 12)
    finally:
        server.stop()


# --- a real Translator -------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator():
    return serving_translator()


def test_a_real_translator_over_http_matches_it_called_directly(translator):
    engine = JaxEngine(translator, text="data")
    server = start_in_thread(create_app(engine, limits=Limits(), window_s=0.01, max_sentences=8))
    try:
        health = wait_healthy(server.url, timeout=300)  # warm-up compiled the programs
        assert health["defaults"]["beam_size"] == 1
        lines = ["go .", "i lost .", "he is calm !", "go home ."]
        for options in ({}, {"beam_size": 3, "alpha": 0.0}):
            status, answer = request(server.url, "POST", "/translate", {"text": lines, **options})
            direct = translator.translate(lines, **options)
            assert status == 200 and answer == {"translations": direct}, answer
        # A merged batch gives each request what it gets alone.
        answers = [None] * 4

        def client(i):
            answers[i] = request(server.url, "POST", "/translate", {"text": lines[i]})

        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert answers == [(200, {"translations": [t]}) for t in translator.translate(lines)]
    finally:
        server.stop()


def test_nbest_sampling_and_prefix_over_http_match_translate_options(translator):
    engine = JaxEngine(translator, text="data")
    app = create_app(engine, limits=Limits(), window_s=0.001, max_sentences=8, warm_up=False)
    server = start_in_thread(app)
    try:
        wait_healthy(server.url)
        lines = ["go .", "i lost ."]
        for options in (
            {"beam_size": 3, "nbest": 2},
            {"temperature": 1.0, "seed": 3, "nbest": 2},
            {"prefix": "va", "beam_size": 2},
        ):
            status, answer = request(server.url, "POST", "/translate", {"text": lines, **options})
            assert status == 200, answer
            direct = translator.translate_options(lines, options)
            assert answer["translations"] == [h.texts[0] for h in direct], options
            if options.get("nbest", 1) > 1:
                assert answer["nbest"] == [
                    [
                        {"text": t, "score": s, "log_prob": p}
                        for t, s, p in zip(h.texts, h.scores, h.log_probs, strict=True)
                    ]
                    for h in direct
                ]
            else:
                assert "nbest" not in answer
        status, answer = request(server.url, "POST", "/translate", {"text": lines, "prefix": "va"})
        assert all(t.startswith("va") for t in answer["translations"]), answer
        status, answer = request(
            server.url, "POST", "/translate", {"text": lines, "prefix": ["va", None]}
        )
        assert status == 200 and answer["translations"][0].startswith("va"), answer
    finally:
        server.stop()


def _concurrently(url, bodies):
    """The (status, answer) of each body POSTed to /translate at once, in order."""
    answers = [None] * len(bodies)

    def client(i):
        answers[i] = request(url, "POST", "/translate", bodies[i])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def test_merged_sampling_requests_each_sample_as_alone(translator):
    """A request's samples depend on its seed, text and options only: the batcher merges
    concurrent requests (a long window) and each line is keyed by its index in its own
    request, not its row in the merged batch."""
    engine = JaxEngine(translator, text="data")
    app = create_app(engine, limits=Limits(), window_s=0.5, max_sentences=16, warm_up=False)
    server = start_in_thread(app)
    try:
        wait_healthy(server.url)
        options = {"temperature": 2.0, "seed": 5, "nbest": 2}
        requests = [["go .", "i lost ."], ["he is calm !"], ["go home .", "go ."]]
        answers = _concurrently(server.url, [{"text": lines, **options} for lines in requests])
        health = request(server.url, "GET", "/health")[1]
        assert health["batches"] < len(requests)  # merged (a 0.5 s window)
        for lines, (status, answer) in zip(requests, answers, strict=True):
            direct = translator.translate_options(lines, options)
            assert status == 200 and answer["translations"] == [h.texts[0] for h in direct]
            assert [[h["text"] for h in n] for n in answer["nbest"]] == [
                list(h.texts) for h in direct
            ]
    finally:
        server.stop()


def test_the_engine_options_start_from_the_servers_defaults(translator):
    engine = JaxEngine(translator, beam_size=3, alpha=0.2, max_decode_len=6)
    assert engine.default_options == DecodeOptions(beam_size=3, alpha=0.2)
    assert engine.translator.settings["max_decode_len"] == 6
    assert engine.options({"beam_size": 1}) == DecodeOptions(beam_size=1, alpha=0.2)


# --- the launcher --------------------------------------------------------------------------


def _listening_url(process) -> str:
    """The URL a launched server says it listens on (its stderr read up to that line)."""
    for line in process.stderr:
        found = re.search(r"Serving on (http://\S+)", line)
        if found:
            return found.group(1)
    raise AssertionError("the server never said where it listens")


def _start(args, env=None):
    process = subprocess.Popen(
        [sys.executable, "-m", "experiments.serve", *args],
        cwd=REPO,
        env=env or subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process


def test_a_bad_flag_value_is_one_fatal_line_before_the_model_loads(tmp_path):
    process = _start([f"--workdir={tmp_path / 'no_run'}", "--port=0", "--warm_up_threads=-1"])
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2 and "Traceback" not in stderr, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("FATAL: --warm_up_threads=-1: give a whole number >= 0"), last


def test_connections_send_without_nagles_delay():
    """Each accepted connection has TCP_NODELAY (with protocol TCP, asyncio sets it too):
    without it, a response's two writes waited ~40 ms for the client's delayed ACK."""
    server = bind("127.0.0.1", 0)
    client = socket.create_connection(server.getsockname()[:2])
    try:
        connection, _ = server.accept()
        with connection:
            assert connection.proto == socket.IPPROTO_TCP
            assert connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        client.close()
        server.close()


def test_a_taken_port_is_one_fatal_line_before_the_model_loads(tmp_path):
    """The port is taken before anything else: one FATAL line naming host:port and the
    flags, even for a workdir that does not exist (the model would load after the port)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        process = _start([f"--workdir={tmp_path / 'no_run'}", f"--port={port}"])
        _, stderr = process.communicate(timeout=120)
    finally:
        taken.close()
    assert process.returncode == 2, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"FATAL: cannot listen on 127.0.0.1:{port} ("), last
    assert "choose another port (--port; 0 picks a free one)" in last


def test_the_launcher_without_fastapi_says_how_to_install_it(tmp_path):
    code = (
        "import sys, runpy; sys.modules['fastapi'] = None; "
        f"sys.argv = ['serve', '--workdir={tmp_path}']; "
        "runpy.run_module('experiments.serve', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (fatal,) = [line for line in result.stderr.splitlines() if line.startswith("FATAL: ")]
    assert "pip install 'transformer_jax[serve]'" in fatal


@pytest.fixture(scope="module")
def workdir(tiny_workdir):
    """The tiny runlocal model trained on 500 pairs, shared with the translate tests
    (tests/conftest.py)."""
    return tiny_workdir


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_the_ctranslate2_engine_over_http_matches_translate_lines(workdir, tmp_path):
    pytest.importorskip("ctranslate2")
    from transformer_jax.export import convert, load_trained
    from transformer_jax.export.ct2_translate import (
        load_truecaser,
        translate_detailed,
        translate_lines,
    )
    from transformer_jax.serving.engines import CTranslate2Engine

    convert(load_trained(workdir), tmp_path / "ct2")
    engine = CTranslate2Engine(tmp_path / "ct2", beam_size=2)
    server = start_in_thread(create_app(engine, limits=Limits(), window_s=0.01, max_sentences=8))
    try:
        assert wait_healthy(server.url)["engine"] == "ctranslate2"
        lines = ["Go.", "I lost.", "He is calm."]
        status, answer = request(server.url, "POST", "/translate", {"text": lines})
        texts = translate_lines(tmp_path / "ct2", lines, beam_size=2)
        natural = load_truecaser(tmp_path / "ct2").natural
        assert status == 200 and answer == {
            "translations": [natural(t, s) for t, s in zip(texts, lines, strict=True)]
        }
        # The options, as ct2_translate maps them.
        for options in (
            {"nbest": 2},
            {"prefix": "je"},
            {"temperature": 1.0, "top_k": 5, "seed": 3, "nbest": 2},
        ):
            status, answer = request(server.url, "POST", "/translate", {"text": lines, **options})
            direct = translate_detailed(tmp_path / "ct2", lines, beam_size=2, **options)
            want = [natural(h.texts[0], s) for h, s in zip(direct.hypotheses, lines, strict=True)]
            assert status == 200 and answer["translations"] == want, (options, answer)
            if options.get("nbest", 1) > 1:
                assert [[h["score"] for h in n] for n in answer["nbest"]] == [
                    list(h.scores) for h in direct.hypotheses
                ]
        # Sampling requests are decoded in calls of their own: each samples as it does alone.
        sampling = {"temperature": 1.5, "seed": 4}
        answers = _concurrently(server.url, [{"text": line, **sampling} for line in lines])
        for line, (status, answer) in zip(lines, answers, strict=True):
            alone = translate_detailed(tmp_path / "ct2", [line], beam_size=2, **sampling)
            assert (status, answer["translations"]) == (200, [natural(alone.texts[0], line)])
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_the_launcher_serves_a_trained_run_and_stops_gracefully(workdir, stop):
    """Ctrl-C and SIGTERM (`docker stop`) alike: a request in flight is answered, then
    "Server stopped." and exit 0."""
    process = _start([f"--workdir={workdir}", "--port=0", "--max_batch_sentences=4"])
    try:
        url = _listening_url(process)
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.append(process.stderr.read()), daemon=True)
        reader.start()
        health = wait_healthy(url, timeout=300)
        assert health["engine"] == "jax" and health["step"] == 4  # the run's last checkpoint
        status, answer = request(url, "POST", "/translate", {"text": ["Go.", "I lost."]})
        assert status == 200 and len(answer["translations"]) == 2, answer
        assert all(isinstance(t, str) for t in answer["translations"])
        # A request in flight when the signal comes is still answered.
        body = {"text": ["I am cold.", "We lost."], "beam_size": 8}  # a new width: compiles
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(request, url, "POST", "/translate", body)
            time.sleep(0.2)
            process.send_signal(stop)
            assert process.wait(timeout=60) == 0
            status, answer = in_flight.result(timeout=60)
        assert status == 200 and len(answer["translations"]) == 2, answer
        reader.join(timeout=10)
        assert rest and rest[0].rstrip().endswith("Server stopped."), rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_a_server_stopped_while_it_warms_up_ends_cleanly(workdir):
    """SIGTERM during the warm-up (`docker stop` of a starting container) ended in
    "terminate called ..." / "Fatal Python error: Aborted" (exit 134) two times in three: the
    process exited while the warm-up thread compiled. The warm-up now stops after the batch
    at hand and the server waits for it."""
    process = _start([f"--workdir={workdir}", "--port=0", "--max_batch_sentences=8"])
    try:
        url = _listening_url(process)
        status, health = request(url, "GET", "/health")
        assert (status, health["status"]) == (503, "warming up")
        time.sleep(1.0)  # into the first compiles
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
        rest = process.stderr.read()
        assert rest.rstrip().endswith("Server stopped."), rest[-3000:]
        assert "terminate called" not in rest and "Fatal Python error" not in rest, rest[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
