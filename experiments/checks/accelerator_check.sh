#!/usr/bin/env bash
# The accelerator check: on a machine with an NVIDIA GPU, install this checkout beside the jax
# that is there, run the steps below within a budget, and print one JSON line of figures.
#
#     bash experiments/checks/accelerator_check.sh [--dry-run | --list]      (make accelerator-check)
#
# Made for the GPU machines of today: Python 3.12 with a CUDA jax (0.10.x or 0.11.x) and flax,
# optax, chex, numpy preinstalled, no network, and the missing pure-Python packages brought as
# a folder of wheels (experiments/checks/gpu_wheels.sh makes it on a machine with an index).
#
# 1. No GPU visible (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides them all): exit 3 at
#    once with a message saying so; nothing is installed. JAXRL_ACCEL_PLATFORM=cpu skips this
#    check and runs everything on the CPU with small sizes (how the path is tested without a
#    GPU: experiments/checks/accelerator_offline_check.sh).
# 2. Where jax comes from, in this order:
#    - preinstalled: $PYTHON's jax sees the GPU (with JAXRL_ACCEL_PLATFORM=cpu: imports). The
#      venv ($JAXRL_ACCEL_VENV, default /tmp/jaxrl_accel_venv, made fresh) sees $PYTHON's
#      packages (--system-site-packages, and a .pth line when $PYTHON is itself a venv) and
#      the installed jax, jaxlib, jax plugins and nvidia-* libraries are pinned as constraints:
#      pip installs the project and what is missing but never replaces them (a jax our pins do
#      not allow fails the install with pip's message instead);
#    - wheels: a folder of wheels ($JAXRL_WHEELS, default ./wheels) that holds "jax[$JAX_CUDA]";
#    - index: "jax[$JAX_CUDA]==$JAX_VERSION" from the package index.
#    The other packages come from the wheel folder when it holds .whl files, and with
#    JAXRL_OFFLINE=1 from nothing else (pip --no-index). Extras: $JAXRL_ACCEL_EXTRAS (default
#    bench,optuna: the search step's batched Optuna, target >= 5x the one-trial loop at
#    B=64). It prints which packages came from where (kept, wheels, index, this checkout).
# 3. The steps: one `step NAME SECONDS [--gpus N] COMMAND...` line each in steps() below. A
#    step's last stdout line (one JSON object) is its figure; it runs under `timeout` for at
#    most SECONDS and at most what is left of the budget. JAXRL_ACCEL_BUDGET_S (default 480)
#    covers the whole script, install included: a step with no time left is skipped and says
#    so. JAXRL_ACCEL_STEPS=a,b runs only those (names: --list). --gpus N: skipped with fewer.
#    JAXRL_ACCEL_INSTALL=skip uses $PYTHON as it is (it must import jaxrl_async already).
#    atari_ppo (last: CleanRL's PPO on EnvPool Pong, experiments/reproduce --suite atari, 10M
#    steps; JAXRL_ACCEL_PONG_STEPS=N trains N) needs the envpool extra
#    (JAXRL_ACCEL_EXTRAS=bench,envpool) and more than the default budget: run it alone with
#    JAXRL_ACCEL_STEPS=atari_ppo JAXRL_ACCEL_BUDGET_S=700.
# --dry-run stops after steps 1 and the choice of 2, printing the plan as one JSON line; --list
# prints the steps (NAME SECONDS) and stops.
set -euo pipefail

SECONDS=0  # bash's clock since the script started: the budget covers all of it
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${JAXRL_ACCEL_VENV:-/tmp/jaxrl_accel_venv}"
WHEELS="${JAXRL_WHEELS:-$ROOT/wheels}"
JAX_VERSION="${JAX_VERSION:-0.11.2}"
JAX_CUDA="${JAX_CUDA:-cuda12}"
BUDGET_S="${JAXRL_ACCEL_BUDGET_S:-480}"
ONLY="${JAXRL_ACCEL_STEPS:-}"
PLATFORM="${JAXRL_ACCEL_PLATFORM:-gpu}"
EXTRAS="${JAXRL_ACCEL_EXTRAS:-bench,optuna}"
MODE=run
[[ "${1:-}" == "--dry-run" ]] && MODE=dry-run
[[ "${1:-}" == "--list" ]] && MODE=list
LOG=""  # the steps' log folder, made before they run

fail() { echo "accelerator_check: $1" >&2; exit "${2:-1}"; }
say() { echo "accelerator_check: $*" >&2; }
[[ "$PLATFORM" == gpu || "$PLATFORM" == cpu ]] \
    || fail "JAXRL_ACCEL_PLATFORM='$PLATFORM': allowed values are gpu (default) and cpu" 2
[[ "$BUDGET_S" =~ ^[0-9]+$ ]] \
    || fail "JAXRL_ACCEL_BUDGET_S='$BUDGET_S': a whole number of seconds is allowed" 2

# ---------------------------------------------------------------- the steps, one line each
# step NAME SECONDS [--gpus N] COMMAND...   Run from the checkout's root with it on PYTHONPATH;
# $PY is the venv's python, $(size GPU CPU) a size that shrinks on the CPU. Add a line to add one.
steps() {
    step versions 60 "$PY" experiments/checks/accelerator_versions.py
    step peers 210 "$PY" experiments/bench/bench_peers.py --preset "$(size gpu cpu)" --repeats "$(size 3 1)"
    step reproduce_breakout 90 sh -c '"$0" -m experiments.reproduce --suite minatar-breakout --budget "$1" --out "$2" | grep "^{" | tail -n 1' "$PY" "$(size 9994240 8192)" "$LOG/reproduce"
    step host_envs 100 "$PY" experiments/bench/bench_host_envs.py --cases "sleep:5:$(size 64 8)" "sleep:20:$(size 256 16)" "envpool:Pong-v5:$(size 64 8)" --budget-s "$(size 2 1)" --max-updates "$(size 30 4)" --one-line
    step sweep 120 "$PY" experiments/bench/bench_sweep.py --sweep-only --total-timesteps "$(size 1e5 2e4)"
    step sync 150 "$PY" experiments/bench/bench_sync.py --preset cartpole-large --num-envs "$(size 2048 64)" --num-steps "$(size 128 32)" --total-timesteps "$(size 2e7 2e5)" --repeats "$(size 2 1)" --baseline
    step async_1gpu 120 env CUDA_VISIBLE_DEVICES="$FIRST_GPU" "$PY" experiments/bench/bench_async.py --rounds "$(size 3 1)" --updates "$(size 50 5)"
    step async_2gpu 120 --gpus 2 "$PY" experiments/bench/bench_async.py --rounds 3 --updates 50
    step search 120 "$PY" experiments/bench/bench_search.py --only speed --loop-trials "$(size 64 8)" --batches $(size "16 64" 8)
    step pbt 300 "$PY" experiments/bench/bench_pbt.py --population "$(size 64 4)" --seeds 1 --total-timesteps "$(size 100352 4096)" --ready-every "$(size 10 2)"
    step pbt_scaling 60 "$PY" experiments/bench/bench_pbt.py --populations "$(size 64,1024 4)" --num-envs "$(size 16 4)" --num-steps "$(size 16 8)" --total-timesteps "$(size 5120 256)" --ready-every "$(size 5 2)"
    step atari_ppo 600 sh -c '"$0" -m experiments.reproduce --suite atari --seeds 1 --budget "$1" --out "$2" | grep "^{" | tail -n 1' "$PY" "$(size "${JAXRL_ACCEL_PONG_STEPS:-9999360}" 2048)" "$LOG/reproduce_atari"
}
size() { if (( CPU )); then echo "$2"; else echo "$1"; fi; }

# ---------------------------------------------------------------- step: run one, or list it
RAN=()
step() {
    local name=$1 limit=$2 gpus=0; shift 2
    if [[ "${1:-}" == --gpus ]]; then gpus=$2; shift 2; fi
    if [[ "$MODE" == list ]]; then echo "$name $limit"; return; fi
    if [[ -n "$ONLY" && ",$ONLY," != *",$name,"* ]]; then return; fi
    RAN+=("$name")
    local left=$(( BUDGET_S - SECONDS ))
    if (( NUM_GPUS < gpus )); then
        printf '{"skipped": "needs %d GPUs, %d visible"}\n' "$gpus" "$NUM_GPUS" > "$LOG/$name.json"
        return
    fi
    if (( left <= 0 )); then
        say "$name skipped: the budget of ${BUDGET_S}s is spent"
        printf '{"skipped": "budget of %ds spent"}\n' "$BUDGET_S" > "$LOG/$name.json"
        return
    fi
    (( limit > left )) && limit=$left
    say "$name (at most ${limit}s)"
    if ! timeout "$limit" "$@" > "$LOG/$name.out" 2> "$LOG/$name.err"; then
        say "$name failed or ran past ${limit}s (see $LOG/$name.err)"
        printf '{"error": "failed or ran past %ds"}\n' "$limit" > "$LOG/$name.json"
    else
        tail -n 1 "$LOG/$name.out" > "$LOG/$name.json"
    fi
}

if [[ "$MODE" == list ]]; then
    CPU=0 PY=python FIRST_GPU=0 NUM_GPUS=0
    steps
    exit 0
fi
if [[ -n "$ONLY" ]]; then  # every name asked for is a step
    known=" $(MODE=list; CPU=0 PY=python FIRST_GPU=0 NUM_GPUS=0; steps | cut -d' ' -f1 | tr '\n' ' ')"
    for name in ${ONLY//,/ }; do
        [[ "$known" == *" $name "* ]] \
            || fail "JAXRL_ACCEL_STEPS names '$name'; allowed values:${known% }" 2
    done
fi

# ---------------------------------------------------------------- 1. is there a GPU?
if [[ "$PLATFORM" == cpu ]]; then
    CPU=1 NUM_GPUS=0 GPU_NAME="none (JAXRL_ACCEL_PLATFORM=cpu)"
    export JAX_PLATFORMS=cpu
else
    CPU=0
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
        fail "no GPU visible: nvidia-smi -L lists none (${GPU_LIST:-no output}); this check needs \
an NVIDIA GPU (nothing was installed or run)" 3
    fi
    GPU_NAME="$(sed -n 's/^GPU 0: \(.*\) (UUID.*/\1/p' <<<"$GPU_LIST")"
fi
FIRST_GPU="${CUDA_VISIBLE_DEVICES:-0}"
FIRST_GPU="${FIRST_GPU%%,*}"

# ---------------------------------------------------------------- 2. where jax comes from
if [[ "${JAXRL_ACCEL_INSTALL:-}" == skip ]]; then
    SOURCE="as is"
elif PLATFORM="$PLATFORM" "$PYTHON" - <<'EOF' >/dev/null 2>&1
import os, sys
import jax
sys.exit(0 if os.environ["PLATFORM"] == "cpu" or any(d.platform == "gpu" for d in jax.devices())
         else 1)
EOF
then
    SOURCE="preinstalled"
elif compgen -G "$WHEELS/jax_cuda*.whl" >/dev/null; then
    SOURCE="wheels:$WHEELS"
else
    SOURCE="index"
fi
if [[ "$MODE" == dry-run ]]; then
    printf '{"gpus": %d, "gpu": "%s", "install": "%s", "venv": "%s", "jax": "%s"}\n' \
        "$NUM_GPUS" "$GPU_NAME" "$SOURCE" "$VENV" "$JAX_VERSION"
    exit 0
fi

LOG="$(mktemp -d)"
say "$NUM_GPUS GPU(s) ($GPU_NAME); jax: $SOURCE; venv $VENV; budget ${BUDGET_S}s; logs in $LOG"
pip_from=()  # where the packages jax does not bring come from
if compgen -G "$WHEELS/*.whl" >/dev/null; then pip_from+=(--find-links "$WHEELS"); fi
[[ "${JAXRL_OFFLINE:-0}" == 1 ]] && pip_from+=(--no-index)
spec="$ROOT${EXTRAS:+[$EXTRAS]}"
if [[ "$SOURCE" == "as is" ]]; then
    PY="$PYTHON"
else
    rm -rf "$VENV"
    case "$SOURCE" in
        preinstalled)
            "$PYTHON" -m venv --system-site-packages "$VENV"
            # $PYTHON a venv itself: its site-packages are not the "system" ones; a .pth line.
            "$PYTHON" -c 'import sys, sysconfig; sys.prefix != sys.base_prefix and print(sysconfig.get_paths()["purelib"])' \
                > "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_jaxrl_accel_base.pth"
            "$VENV/bin/python" -m pip list --format=freeze 2>/dev/null \
                | grep -iE '^(jax|jaxlib|jax[-_]cuda[0-9]*[-_].*|nvidia[-_].*)==' > "$LOG/keep.txt" || true
            say "kept as installed (constraints): $(tr '\n' ' ' < "$LOG/keep.txt")"
            install=(-c "$LOG/keep.txt" -e "$spec") ;;
        wheels:*)
            "$PYTHON" -m venv "$VENV"
            install=("jax[$JAX_CUDA]==$JAX_VERSION" -e "$spec") ;;
        index)
            "$PYTHON" -m venv "$VENV"
            install=("jax[$JAX_CUDA]==$JAX_VERSION" -e "$spec") ;;
    esac
    PY="$VENV/bin/python"
    "$PY" -m pip list --format=json 2>/dev/null > "$LOG/before.json"
    "$PY" -m pip install --quiet --disable-pip-version-check "${pip_from[@]}" \
        --report "$LOG/install.json" "${install[@]}" > "$LOG/install.out" 2>&1 \
        || fail "pip could not install the project (pip ${pip_from[*]} ${install[*]}): \
$(grep -E 'ERROR|conflict|depends on' "$LOG/install.out" | head -5)" 5
    "$PY" - "$LOG" "$WHEELS" <<'EOF' >&2
import json, sys
from pathlib import Path
log, wheels = Path(sys.argv[1]), Path(sys.argv[2]).resolve().as_uri()
before = {p["name"].lower(): p["version"] for p in json.loads((log / "before.json").read_text())}
where = {"wheels": [], "index": [], "this checkout": [], "preinstalled": []}
for item in json.loads((log / "install.json").read_text())["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    url = item.get("download_info", {}).get("url", "")
    kind = ("this checkout" if "dir_info" in item.get("download_info", {}) else
            "wheels" if url.startswith(wheels) else "index")
    replaced = f" (over {before[name.lower()]})" if name.lower() in before else ""
    where[kind].append(f"{name} {version}{replaced}")
from importlib.metadata import requires, version
import re
wanted = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requires("jaxrl_async")}
installed = {i["metadata"]["name"].lower() for i in json.loads((log / "install.json").read_text())["install"]}
where["preinstalled"] = [f"{n} {before[n]}" for n in sorted((wanted | {"jax", "jaxlib"}) - installed)
                              if n in before]
for kind, names in where.items():
    label = {"wheels": "from the wheel folder", "index": "from the package index",
             "this checkout": "from this checkout (editable)",
             "preinstalled": "preinstalled, used as they are"}[kind]
    print(f"accelerator_check: {label} ({len(names)}): {', '.join(names) or '-'}")
(log / "sources.json").write_text(json.dumps({k: len(v) for k, v in where.items()}))
EOF
fi
"$PY" -c "import jax, sys; sys.exit(0 if jax.devices()[0].platform == '$PLATFORM' else 1)" \
    || fail "jax in $PY does not see the $PLATFORM (jax.devices(): \
$("$PY" -c 'import jax; print(jax.devices())' 2>&1 | tail -1))" 4

# ---------------------------------------------------------------- 3. the steps
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
steps
"$PY" - "$LOG" "$NUM_GPUS" "$GPU_NAME" "$SOURCE" "$SECONDS" "$BUDGET_S" "${RAN[@]}" <<'EOF'
import json, sys
from pathlib import Path

log, gpus, name, source, elapsed, budget, *ran = sys.argv[1:]
out = {"gpus": int(gpus), "gpu": name, "jax_from": source, "budget_s": int(budget),
       "wall_s": int(elapsed)}
try:
    out["packages_from"] = json.loads((Path(log) / "sources.json").read_text())
except OSError:
    pass
for part in ran:
    try:
        out[part] = json.loads((Path(log) / f"{part}.json").read_text())
    except (OSError, ValueError) as error:
        out[part] = {"error": str(error)}
import jax
out["jax"], out["devices"] = jax.__version__, [str(d) for d in jax.devices()]
print(json.dumps(out))
EOF
cat >&2 <<'MSG'
accelerator_check: the same GPU from the container image (docs/scaling.md#containers; the CUDA
image differs from the tested CPU one in BASE alone; docker: --gpus all):
  podman build -t jaxrl_async:cuda --build-arg BASE=nvidia/cuda:12.8.1-base-ubuntu24.04 .
  podman run --rm --device nvidia.com/gpu=all jaxrl_async:cuda \
      python -c "import jax; print(jax.devices())"
  podman run --rm --device nvidia.com/gpu=all jaxrl_async:cuda jaxrl-async train --num-envs 2048
MSG
