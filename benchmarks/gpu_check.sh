#!/usr/bin/env bash
# The accelerator check (python -m benchmarks.accelerator_check) on the GPU machine, with the
# set-up of ../shared/gpu/README.md; the JSON report and the jobs' logs go to $OUT.
#
# Here, once (both folders are git-ignored; the Flax example is a copy, never committed):
#     bash ../shared/gpu/fetch_wheels.sh                    # -> .whl/ and .device_data/
#     bash benchmarks/fetch_gpu_wheels.sh                   # + matplotlib, tqdm, lxml, ...
#     (fetch github:google/flax, then)
#     git --git-dir=<its git dir> archive HEAD examples/wmt | tar -x -C /tmp/flax \
#         && cp -r /tmp/flax/examples/wmt/. .flax_wmt/
# On the device, with the `run` tool:
#     command: bash benchmarks/gpu_check.sh     carry: [".whl", ".device_data", ".flax_wmt"]
#     timeout_s: 560 (the check's budget is 470 s; set-up ~30 s)
# Arguments go to the check: `bash benchmarks/gpu_check.sh --jobs=speed,tests`
# (a second call for the jobs the first one's budget left out), `--budget_s=300`, ...
# BACKGROUND_JOBS=tests BACKGROUND_AFTER=compile runs those jobs in a second check beside the
# first, from when the first starts job BACKGROUND_AFTER (default: at once), into
# $OUT/accelerator_check_background.json: for jobs whose result is not a wall time (the tests),
# beside jobs that compare in turns in one process (compile, gradients): the two share the
# device, so say so beside any number from that time.
# `--setup_only` stops after the set-up (installs and the import check), e.g. on a CPU:
#     PYTHON=<a python3.12> SITE=/tmp/site_probe bash benchmarks/gpu_check.sh --setup_only
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-$PWD/benchmarks/results}
export OUT
start=$(date +%s)
say() { echo "[gpu_check +$(($(date +%s) - start))s] $*"; }

setup_only=0
args=()
for a in "$@"; do
  if [ "$a" = "--setup_only" ]; then setup_only=1; else args+=("$a"); fi
done

# ------------------------------------------------------------ set-up (../shared/gpu/README.md)
if [ -z "${SKIP_INSTALL:-}" ]; then
  ls .whl/*.whl >/dev/null 2>&1 || { say "FATAL: no .whl/*.whl: run ../shared/gpu/fetch_wheels.sh here and carry .whl"; exit 2; }
  say "installing $(ls .whl/*.whl | wc -l) carried wheels into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl || { say "FATAL: pip install of .whl/ failed"; exit 2; }
  export PYTHONPATH="$SITE:$PWD"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # several JAX processes (pytest -n) share the GPU
export TFDS_DATA_DIR=${TFDS_DATA_DIR:-/tmp/tfds} PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$TFDS_DATA_DIR"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader
say "import check"
"$PY" - <<'EOF' || { say "FATAL: the project does not import here (above)"; exit 2; }
import importlib
import importlib.metadata as md

missing = []
for name in ("jax", "flax", "optax", "orbax.checkpoint", "ml_collections", "tensorflow_datasets",
             "sentencepiece", "sacrebleu", "transformer_jax.training", "torch", "pytest", "xdist"):
    try:
        importlib.import_module(name)
    except Exception as error:  # noqa: BLE001
        missing.append(f"{name} ({type(error).__name__}: {error})")
print("missing:", missing or "none")
if not any(m.startswith("jax ") for m in missing):
    import jax

    print({p: md.version(p) for p in ("jax", "flax", "optax")}, jax.devices())
# torch, pytest and xdist are optional: their jobs say "not measured" without them.
raise SystemExit(any(not m.startswith(("torch ", "pytest ", "xdist ")) for m in missing))
EOF
[ "$setup_only" = 1 ] && { say "set-up done (--setup_only)"; exit 0; }

# ------------------------------------------------------------ the check
flax=()
if [ -f .flax_wmt/models.py ]; then flax=(--flax_wmt_dir=.flax_wmt); else say "no .flax_wmt/models.py: Flax WMT rows will say so"; fi
zip=()
[ -f .device_data/fra-eng.zip ] && zip=(--zip_path=.device_data/fra-eng.zip)
say "python -m benchmarks.accelerator_check ${flax[*]} ${zip[*]} ${args[*]}"
# The check keeps its own budget (470 s); this outer limit only guards against a hang.
check_timeout=${CHECK_TIMEOUT:-510}
check_start=$(date +%s)
background=""
if [ -n "${BACKGROUND_JOBS:-}" ]; then
  (
    after=${BACKGROUND_AFTER:-}
    while [ -n "$after" ] && [ ! -e "$OUT/accelerator_check_logs/$after.log" ] \
          && [ ! -e "$OUT/accelerator_check.json" ]; do sleep 2; done
    left=$((check_timeout - ($(date +%s) - check_start) - 15))
    dry=(); case " ${args[*]} " in *" --dry_run "*) dry=(--dry_run) ;; esac
    say "background: --jobs=$BACKGROUND_JOBS, ${left} s left"
    timeout -k 10 "$((left + 10))" "$PY" -m benchmarks.accelerator_check "${flax[@]}" "${zip[@]}" \
      "${dry[@]}" --jobs="$BACKGROUND_JOBS" --budget_s="$left" --out="$OUT/accelerator_check_background.json" \
      > "$OUT/accelerator_check_background.out" 2>&1
    say "background: done (exit $?); $OUT/accelerator_check_background.out"
  ) &
  background=$!
fi
timeout -k 10 "$check_timeout" "$PY" -m benchmarks.accelerator_check "${flax[@]}" "${zip[@]}" \
  --out="$OUT/accelerator_check.json" "${args[@]}"
rc=$?
if [ -n "$background" ]; then
  wait "$background"
  cat "$OUT/accelerator_check_background.out"
fi
say "done (exit $rc); results in $OUT"
exit $rc
