"""Serving translations over HTTP: `python -m experiments.serve --workdir=runs/fra_eng`.

- `requests`: what a `POST /translate` body may hold (`parse_translate`, `Limits`,
  `RequestError`: an HTTP status and a one-line reason).
- `batcher`: the dynamic batcher (requests of a few milliseconds decoded as one batch).
- `engines`: the JAX `Translator` or a CTranslate2 export behind the server, and its warm-up.
- `batch_shapes`: a merged batch's groups of like output budgets, the row counts it pads to.
- `app`: the FastAPI app and how uvicorn runs it (the optional `[serve]` extra: import it
  only where FastAPI is installed).

Nothing here imports FastAPI except `app`.
"""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.serving.batcher": ["Batcher"],
        "transformer_jax.serving.requests": ["Limits", "RequestError", "parse_translate"],
    },
)
