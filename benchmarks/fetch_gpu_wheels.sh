#!/usr/bin/env bash
# The wheels the GPU machine (../shared/gpu/README.md: Python 3.12, jax 0.11.x with CUDA,
# torch, numpy, absl-py, protobuf, pyarrow, tensorstore, chex, pytest) needs for the whole
# accelerator check: ../shared/gpu/fetch_wheels.sh's pins, plus everything else
# requirements.txt pulls in at run time (matplotlib for the report's plots, tqdm, sacrebleu's
# lxml/portalocker, flax's msgpack/yaml, ...), for CPython 3.12 on manylinux. Without them a
# machine that lacks one fails at that import (a README run at its closing report).
# Left out: what the machine has and must keep (jax, jaxlib, numpy, ml_dtypes, scipy,
# opt_einsum, protobuf, pyarrow, tensorstore) and what the check does not run (ctranslate2,
# the server, the notebook, ruff). ~56 MB in .whl/, within the `run` tool's 64 MiB carry.
# Run from the project's root, after ../shared/gpu/fetch_wheels.sh:
#     bash benchmarks/fetch_gpu_wheels.sh
set -euo pipefail
[ -f requirements.txt ] || { echo "run from the project's root" >&2; exit 2; }
[ -d .whl ] || { echo "run ../shared/gpu/fetch_wheels.sh first (.whl/, .device_data/)" >&2; exit 2; }
PY=${PYTHON:-python3}
reqs=$(mktemp) closure=$(mktemp -d)
trap 'rm -rf "$reqs" "$closure"' EXIT
grep -vE '^(#|jax|jaxlib|numpy|ctranslate2|fastapi|uvicorn|starlette|pydantic|nbformat|nbclient|ipykernel|ruff|setuptools|-e|pytest)' \
  requirements.txt | grep . >"$reqs"
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --find-links .whl -d "$closure" -r "$reqs" "$(grep -E '^numpy==' requirements.txt)"
keep_out='^(jax|jaxlib|numpy|ml_dtypes|scipy|opt_einsum|protobuf|pyarrow|tensorstore)-'
for wheel in "$closure"/*.whl; do
  name=$(basename "$wheel")
  [[ $name =~ $keep_out ]] && continue
  [ -e ".whl/$name" ] || cp "$wheel" .whl/
done
du -sh .whl
