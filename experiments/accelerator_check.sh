#!/usr/bin/env bash
# The accelerator check: on a machine with an NVIDIA GPU, build a fresh venv with the CUDA build
# of jax, run the benchmarks below in under 8 minutes, and print one JSON line of figures.
#
#     bash experiments/accelerator_check.sh [--dry-run]      (make accelerator-check)
#
# 1. No GPU visible (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides them all): exit 3 at
#    once with a message saying so; nothing is installed.
# 2. The venv ($JAXRL_ACCEL_VENV, default /tmp/jaxrl_accel_venv, made fresh) gets jax with CUDA
#    from, in this order: a CUDA jax already installed for $PYTHON (the venv then sees the
#    system site-packages), a folder of wheels ($JAXRL_WHEELS, default ./wheels, when it holds
#    .whl files; add JAXRL_OFFLINE=1 to use nothing else), else the package index
#    ("jax[cuda12]==$JAX_VERSION"). Then this project, its other dependencies, and a check that
#    jax sees the GPU.
# 3. Figures (each step under `timeout`, all within $JAXRL_ACCEL_BUDGET_S, default 480 s):
#    - bench_sync at 2048 envs x 128 steps, 2e7 steps, ours and the PureJaxRL-style baseline
#      (experiments/baseline_ppo.py) side by side in one process: SPS, compile;
#    - bench_async with both roles on one GPU, and on two GPUs when there are two;
#    - a 16-config sweep (bench_sweep --sweep-only: 16 configs x 2 seeds in one program);
#    - host envs (bench_host_envs: 64 and 256 waiting envs, EnvPool Pong where installed;
#      workers sized to the cores): collection against the envs' limit, learner busy.
# --dry-run stops after steps 1 and the choice of 2, printing the plan as one JSON line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${JAXRL_ACCEL_VENV:-/tmp/jaxrl_accel_venv}"
WHEELS="${JAXRL_WHEELS:-$ROOT/wheels}"
JAX_VERSION="${JAX_VERSION:-0.10.2}"
BUDGET_S="${JAXRL_ACCEL_BUDGET_S:-480}"
DRY_RUN=0
[[ "${1:-}" == "--dry-run" ]] && DRY_RUN=1

fail() { echo "accelerator_check: $1" >&2; exit "${2:-1}"; }

# ---------------------------------------------------------------- 1. is there a GPU?
if [[ "${CUDA_VISIBLE_DEVICES-unset}" == "" || "${CUDA_VISIBLE_DEVICES-unset}" == "-1" ]]; then
    fail "no GPU visible: CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES}' hides every GPU; \
this check needs an NVIDIA GPU (nothing was installed or run)" 3
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
    fail "no GPU visible: nvidia-smi is not on PATH (no NVIDIA driver); this check needs an \
NVIDIA GPU (nothing was installed or run)" 3
fi
GPU_LIST="$(nvidia-smi -L 2>/dev/null || true)"
NUM_GPUS="$(grep -c '^GPU ' <<<"$GPU_LIST" || true)"
if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    VISIBLE=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)
    (( VISIBLE < NUM_GPUS )) && NUM_GPUS=$VISIBLE
fi
if (( NUM_GPUS < 1 )); then
    fail "no GPU visible: nvidia-smi -L lists none (${GPU_LIST:-no output}); this check needs an \
NVIDIA GPU (nothing was installed or run)" 3
fi
GPU_NAME="$(sed -n 's/^GPU 0: \(.*\) (UUID.*/\1/p' <<<"$GPU_LIST")"

# ---------------------------------------------------------------- 2. where jax[cuda] comes from
if "$PYTHON" - <<'EOF' >/dev/null 2>&1
import jax, sys
sys.exit(0 if any(d.platform == "gpu" for d in jax.devices()) else 1)
EOF
then
    SOURCE="preinstalled"
elif compgen -G "$WHEELS/*.whl" >/dev/null; then
    SOURCE="wheels:$WHEELS"
else
    SOURCE="index"
fi
if (( DRY_RUN )); then
    printf '{"gpus": %d, "gpu": "%s", "install": "%s", "venv": "%s", "jax": "%s"}\n' \
        "$NUM_GPUS" "$GPU_NAME" "$SOURCE" "$VENV" "$JAX_VERSION"
    exit 0
fi

LOG="$(mktemp -d)"
echo "accelerator_check: $NUM_GPUS GPU(s) ($GPU_NAME); jax from $SOURCE into $VENV; logs in $LOG" >&2
rm -rf "$VENV"
case "$SOURCE" in
    preinstalled)
        "$PYTHON" -m venv --system-site-packages "$VENV"
        "$VENV/bin/python" -m pip freeze | grep -i '^jax' > "$LOG/keep.txt" || true
        "$VENV/bin/python" -m pip install -q -c "$LOG/keep.txt" -e "$ROOT" ;;
    wheels:*)
        "$PYTHON" -m venv "$VENV"
        offline=(); [[ "${JAXRL_OFFLINE:-0}" == 1 ]] && offline=(--no-index)
        "$VENV/bin/python" -m pip install -q "${offline[@]}" --find-links "$WHEELS" \
            "jax[cuda12]==$JAX_VERSION" -e "$ROOT" ;;
    index)
        "$PYTHON" -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q "jax[cuda12]==$JAX_VERSION" -e "$ROOT" ;;
esac
PY="$VENV/bin/python"
"$PY" -c 'import jax, sys; sys.exit(0 if jax.devices()[0].platform == "gpu" else 1)' \
    || fail "jax in $VENV does not see the GPU (jax.devices(): \
$("$PY" -c 'import jax; print(jax.devices())' 2>&1 | tail -1))" 4

# ---------------------------------------------------------------- 3. the figures
START=$(date +%s)
step() {  # step NAME SECONDS COMMAND...: the command's last stdout line into $LOG/NAME.json
    local name=$1 limit=$2; shift 2
    local left=$(( BUDGET_S - ($(date +%s) - START) ))
    (( limit > left )) && limit=$left
    if (( limit <= 0 )) || ! timeout "$limit" "$@" > "$LOG/$name.out" 2> "$LOG/$name.err"; then
        echo "accelerator_check: $name failed or ran past ${limit}s (see $LOG/$name.err)" >&2
        echo '{"error": "failed or timed out"}' > "$LOG/$name.json"
    else
        tail -n 1 "$LOG/$name.out" > "$LOG/$name.json"
    fi
}
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
step sync 150 "$PY" experiments/bench_sync.py --preset cartpole-large --num-envs 2048 \
    --num-steps 128 --total-timesteps 2e7 --repeats 2 --baseline
FIRST_GPU="${CUDA_VISIBLE_DEVICES:-0}"
step async_1gpu 120 env CUDA_VISIBLE_DEVICES="${FIRST_GPU%%,*}" \
    "$PY" experiments/bench_async.py --rounds 3 --updates 50
if (( NUM_GPUS >= 2 )); then
    step async_2gpu 120 "$PY" experiments/bench_async.py --rounds 3 --updates 50
else
    echo '{"skipped": "one GPU"}' > "$LOG/async_2gpu.json"
fi
step sweep 120 "$PY" experiments/bench_sweep.py --sweep-only
step host_envs 100 "$PY" experiments/bench_host_envs.py --cases sleep:5:64 sleep:20:256 \
    envpool:Pong-v5:64 --budget-s 2 --max-updates 30 --one-line
"$PY" - "$LOG" "$NUM_GPUS" "$GPU_NAME" "$SOURCE" "$START" <<'EOF'
import json, sys, time
from pathlib import Path

log, gpus, name, source, start = sys.argv[1:]
out = {"gpus": int(gpus), "gpu": name, "jax_from": source,
       "wall_s": round(time.time() - int(start), 1)}
for part in ("sync", "async_1gpu", "async_2gpu", "sweep", "host_envs"):
    try:
        out[part] = json.loads((Path(log) / f"{part}.json").read_text())
    except (OSError, ValueError) as error:
        out[part] = {"error": str(error)}
import jax
out["jax"], out["devices"] = jax.__version__, [str(d) for d in jax.devices()]
print(json.dumps(out))
EOF
