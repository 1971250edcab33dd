"""The HTTP/JSON server: a FastAPI app over one engine and one dynamic batcher, run by uvicorn.

    app = create_app(JaxEngine(translator), limits=Limits(), window_s=0.005, max_sentences=64)
    serve(app, bind("127.0.0.1", 8000))                  # blocks; Ctrl-C stops it
    server = start_in_thread(app, "127.0.0.1", 0)        # tests: a real server, its own port
    server.url; server.stop()

Routes:
- `POST /translate` `{"text": [...], ...options}` -> `{"translations": [...]}`, one per
  sentence, in order (`requests.py` says what a body may hold); with `nbest` > 1 also
  `"nbest": [[{"text", "score", "log_prob"}, ...], ...]`, best first. A bad request gets a
  4xx and `{"error": "<one line>"}` (400; 413 for a body over `max_body_bytes`, read no
  further); a failed decoding 500, with the same shape. Nothing a client sends stops the
  server.
- `GET /health`: 503 `{"status": "warming up"}` while the engine compiles its programs
  (`engines.py`), then 200 `{"status": "ok", "engine": ..., "step": ..., ..., "batches": ...,
  "batched_sentences": ...}` (engine calls and their sentences so far: the mean batch).

Concurrency: the event loop reads and checks requests; decoding happens on the batcher's one
worker thread (`batcher.py`), which merges the requests of a few milliseconds into one batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# FastAPI and uvicorn are the optional `[serve]` extra: this module is imported only by the
# serve launcher and the serving tests and benchmark, after they checked it is installed.
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from transformer_jax.runtime import device_memory
from transformer_jax.serving.batcher import Batcher
from transformer_jax.serving.requests import Limits, RequestError, parse_translate

logger = logging.getLogger("transformer_jax.serving")

# How long a server stopped during its warm-up waits for the batch at hand to compile.
WARM_UP_STOP_S = 60


@dataclasses.dataclass
class _State:
    status: str = "warming up"  # -> "ok", or "failed"
    error: str | None = None
    batcher: Batcher | None = None
    stopping: threading.Event = dataclasses.field(default_factory=threading.Event)


def create_app(
    engine: Any,
    *,
    limits: Limits,
    window_s: float,
    max_sentences: int,
    adaptive: bool = False,
    warm_up: bool = True,
    on_failure: Callable[[str], None] | None = None,
) -> FastAPI:
    """The app over `engine` (`engines.JaxEngine`, `engines.CTranslate2Engine`, or any
    object with their `options(given)`, `translate(lines, options, line_ids=...)`,
    `warm_up(n, stop=event)`, `describe()` and optionally `per_line_samples`).

    At startup a thread warms the engine up (`warm_up=False`: not) and starts the batcher
    (`window_s`, `max_sentences`, `adaptive`: `batcher.Batcher`); until then /health answers 503
    and /translate 503. If the warm-up raises, /health answers 500 with the reason and
    `on_failure(reason)` is called (the launcher stops the server). Stopped during the
    warm-up, the app sets `stop` and waits for the batch at hand (`WARM_UP_STOP_S` at most).
    """
    state = _State()

    def start() -> None:
        try:
            if warm_up:
                began = time.perf_counter()
                batches = engine.warm_up(max_sentences, stop=state.stopping)
                if state.stopping.is_set():
                    return
                seconds = time.perf_counter() - began
                logger.info("warm-up: %d batches compiled and decoded in %.1f s", batches, seconds)
            state.batcher = Batcher(
                engine.translate, window_s=window_s, max_sentences=max_sentences, adaptive=adaptive
            )
            state.status = "ok"
        except Exception as error:  # reported by /health and on_failure; the process decides
            reason = f"warm-up failed: {error!r}"
            if device_memory.is_out_of_memory(error):  # its largest batch does not fit
                reason = (
                    f"{device_memory.describe(error, 'warming up')}: start the server with a "
                    f"smaller --max_batch_sentences (now {max_sentences} sentences a batch)"
                )
            state.status, state.error = "failed", _one_line(reason)
            logger.error(state.error)
            if on_failure is not None:
                on_failure(state.error)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        warming = threading.Thread(target=start, name="warm-up", daemon=True)
        warming.start()
        yield
        # Stopped while warming up: the batch at hand ends first (a process that exits while
        # a thread compiles aborts in XLA's C++ teardown: "terminate called ...", exit 134).
        state.stopping.set()
        warming.join(timeout=WARM_UP_STOP_S)
        if warming.is_alive():
            logger.warning("stopping while the warm-up still compiles (over %d s)", WARM_UP_STOP_S)
        if state.batcher is not None:
            state.batcher.close(timeout=30)

    app = FastAPI(title="transformer_jax", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.serving = state

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse({"error": _one_line(str(error.detail))}, status_code=error.status_code)

    @app.get("/health")
    async def health() -> JSONResponse:
        if state.status == "ok":
            batcher = state.batcher  # for load tests: how well requests were merged
            counts = {"batches": batcher.calls, "batched_sentences": batcher.sentences}
            return JSONResponse({"status": "ok", **engine.describe(), **counts})
        if state.status == "failed":
            return JSONResponse({"status": "failed", "error": state.error}, status_code=500)
        return JSONResponse({"status": state.status}, status_code=503)

    @app.post("/translate")
    async def translate(request: Request) -> JSONResponse:
        if state.batcher is None:
            if state.status == "failed":
                return _error(500, state.error)
            return _error(503, "the model is still loading; retry once GET /health answers 200.")
        try:
            body = await read_body(request, limits.max_body_bytes)
            lines, given = parse_translate(body, limits)
            options = engine.options(given)
        except RequestError as error:
            return _error(error.status, error.reason)
        # A prefix per sentence belongs to this request's lines: never merged with others;
        # nor samples, where the engine cannot key them per line (engines.py, "Sampling").
        mergeable = not isinstance(options.prefix, tuple) and (
            not options.sampling or getattr(engine, "per_line_samples", False)
        )
        try:
            future = state.batcher.submit(lines, options, mergeable=mergeable)
            results = await asyncio.wrap_future(future)
        except RequestError as error:
            return _error(error.status, error.reason)
        except ValueError as error:  # the input or options (e.g. a source too long to encode)
            return _error(400, str(error))
        except Exception as error:  # the batch failed; this server answers the next one
            if device_memory.is_out_of_memory(error):  # a batch too large: fewer may fit
                reason = device_memory.describe(error, "decoding a batch")
                logger.warning("%s", reason)  # no traceback: the reason is the whole story
                return _error(
                    503,
                    f"{reason}; this request had {len(lines)} line(s): send fewer lines a "
                    "request, or start the server with a smaller --max_batch_sentences.",
                )
            logger.exception("decoding failed")
            return _error(500, f"decoding failed: {type(error).__name__}: {error}")
        answer: dict[str, Any] = {"translations": [hypotheses[0]["text"] for hypotheses in results]}
        if options.nbest > 1:
            answer["nbest"] = results
        return JSONResponse(answer)

    return app


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body, or RequestError(413) as soon as it is known to exceed `max_bytes`
    (from Content-Length, else while it streams in: nothing more is read)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise RequestError(400, f"invalid Content-Length {declared!r}.")
        if int(declared) > max_bytes:
            raise RequestError(413, _too_large(int(declared), max_bytes))
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise RequestError(413, _too_large(None, max_bytes))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int | None, max_bytes: int) -> str:
    """The 413 reason; size None: still streaming in, known only to be over the limit."""
    what = f"{size} bytes" if size is not None else f"more than {max_bytes} bytes"
    return (
        f"the body has {what}, over the server's limit of {max_bytes} bytes "
        "(--max_body_bytes); send fewer sentences per request."
    )


def _error(status: int, reason: str) -> JSONResponse:
    return JSONResponse({"error": _one_line(reason)}, status_code=status)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --- running it ------------------------------------------------------------------------------


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one; `socket.getsockname()` says it).

    Its connections send without Nagle's delay (TCP_NODELAY): uvloop (which uvicorn picks when
    installed, as orbax-checkpoint's requirement makes it) sets it on every connection, but
    asyncio's own event loop only on sockets whose protocol says TCP, which a socket made with
    protocol 0 does not, and then each response (headers and body, two writes) waited for the
    client's delayed ACK: ~50 ms a request instead of ~8 (benchmarks/LOG.md, 2026-11-27)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Linux: accepted ones inherit
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise OSError(  # the message alone: str() of an errno'd OSError leads with "[Errno n]"
            f"cannot listen on {host}:{port} ({error.strerror or error}): choose another "
            "port (--port; 0 picks a free one) or host (--host)",
        ) from error
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_server(app: FastAPI, *, access_log: bool = False) -> uvicorn.Server:
    """A uvicorn server for `app` (its own log lines at WARNING, the access log if asked)."""
    config = uvicorn.Config(
        app,
        log_level="info" if access_log else "warning",
        access_log=access_log,
        timeout_graceful_shutdown=5,
        lifespan="on",
    )
    return uvicorn.Server(config)


class Terminated(Exception):
    """SIGTERM, raised once uvicorn has shut down on it (see `serve`)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


def serve(
    app: FastAPI, sock: socket.socket, *, access_log: bool = False, stderr: Any = None
) -> uvicorn.Server:
    """Runs `app` on the bound `sock` until Ctrl-C/SIGTERM (or `server.should_exit`); says
    where it listens on `stderr` first. `app.state.server` is the uvicorn server (set
    `should_exit` to stop it). Returns the stopped server.

    On either signal uvicorn stops taking connections, lets the requests in flight finish,
    then raises the signal again under the handler it found: SIGTERM's default would end the
    process there (exit 143, no closing line), so in the main thread `serve` installs one
    that raises `Terminated`, and a `docker stop` ends as Ctrl-C does: "Server stopped.",
    exit 0."""
    server = make_server(app, access_log=access_log)
    app.state.server = server
    print(
        f"Serving on {url_of(sock)} (GET /health, POST /translate)",
        file=stderr or sys.stderr,
        flush=True,
    )
    main = threading.current_thread() is threading.main_thread()  # signals go to it only
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, Terminated):  # uvicorn re-raises the signal it shut down on
        pass
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    print("Server stopped.", file=stderr or sys.stderr, flush=True)
    return server


@dataclasses.dataclass
class ServerThread:
    """A real server on its own thread (tests, benchmarks): `url`, then `stop()`."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    def stop(self, timeout: float = 30) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)


def start_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> ServerThread:
    """Starts `app` on host:port (0: a free port) on a daemon thread; returns once it listens
    (GET /health may still answer 503 while the engine warms up)."""
    sock = bind(host, port)
    server = make_server(app)
    app.state.server = server
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server thread ended before it started listening.")
        threading.Event().wait(0.01)
    return ServerThread(server, thread, url_of(sock))
