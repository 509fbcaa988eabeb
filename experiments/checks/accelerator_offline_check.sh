#!/usr/bin/env bash
# The accelerator check's GPU-machine path, tested here without a GPU and without an index:
#
#     bash experiments/checks/accelerator_offline_check.sh [WHEELS]     (default /tmp/jaxrl_gpu_wheels)
#
# 1. The wheel folder: made by experiments/checks/gpu_wheels.sh when it holds no wheels (the only step
#    that uses the package index).
# 2. The "image": a fresh Python 3.12 venv (.ci/find_python 3.12, or $PYTHON_LATEST) holding
#    what the GPU machines have preinstalled, with the CPU build of their jax: jax 0.11.2,
#    flax 0.12.10, optax 0.2.8, chex 0.1.92, numpy 2.5.2, pytest ($JAXRL_IMAGE_PINS).
# 3. experiments/checks/accelerator_check.sh with PYTHON= that venv's python, JAXRL_ACCEL_PLATFORM=cpu
#    (the GPU check stubbed, small sizes), JAXRL_OFFLINE=1 and JAXRL_WHEELS=the folder, pip's
#    configuration files and PIP_* settings cleared (PIP_CONFIG_FILE=/dev/null): nothing but
#    the folder is reachable. Steps $JAXRL_ACCEL_STEPS (default versions,sync), budget
#    $JAXRL_ACCEL_BUDGET_S (default 420).
# It must install the project, keep the image's jax, and reach the benchmarks: exit 0 when the
# check's JSON line reports the image's jax and a figure for every step asked for; 1 otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WHEELS="${1:-/tmp/jaxrl_gpu_wheels}"
BASE="${JAXRL_OFFLINE_BASE:-/tmp/jaxrl_offline_image}"
PINS="${JAXRL_IMAGE_PINS:-jax==0.11.2 jaxlib==0.11.2 flax==0.12.10 optax==0.2.8 chex==0.1.92 numpy==2.5.2 pytest}"
STEPS="${JAXRL_ACCEL_STEPS:-versions,sync}"
say() { echo "accelerator_offline_check: $*" >&2; }

PY312="${PYTHON_LATEST:-$("$ROOT/.ci/find_python" 3.12)}"
if ! compgen -G "$WHEELS/*.whl" >/dev/null; then
    say "no wheels in $WHEELS: downloading them (experiments/checks/gpu_wheels.sh)"
    PYTHON="$PY312" bash "$ROOT/experiments/checks/gpu_wheels.sh" "$WHEELS" > /dev/null
fi
say "the image: $BASE from $PY312 with $PINS"
rm -rf "$BASE"
"$PY312" -m venv "$BASE"
# shellcheck disable=SC2086
"$BASE/bin/python" -m pip install --quiet --disable-pip-version-check $PINS
IMAGE_JAX="$("$BASE/bin/python" -c 'import jax; print(jax.__version__)')"

say "the check, offline (only $WHEELS), CPU, steps $STEPS"
out="$(env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT \
    PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PYTHON="$BASE/bin/python" \
    JAXRL_ACCEL_PLATFORM=cpu JAXRL_OFFLINE=1 JAXRL_WHEELS="$WHEELS" \
    JAXRL_ACCEL_VENV="${JAXRL_ACCEL_VENV:-/tmp/jaxrl_offline_venv}" JAXRL_ACCEL_STEPS="$STEPS" \
    bash "$ROOT/experiments/checks/accelerator_check.sh")"
echo "$out"
IMAGE_JAX="$IMAGE_JAX" STEPS="$STEPS" python3 - "$out" <<'PYEOF'
import json, os, sys
result = json.loads(sys.argv[1].splitlines()[-1])
problems = [] if result["jax"] == os.environ["IMAGE_JAX"] else [
    f"jax {result['jax']} is not the image's {os.environ['IMAGE_JAX']}"]
problems += [f"step {s}: {result.get(s)}" for s in os.environ["STEPS"].split(",")
             if not isinstance(result.get(s), dict) or {"error", "skipped"} & set(result[s])]
print("accelerator_offline_check: " + ("; ".join(problems) if problems else
      f"ok: installed offline beside the image's jax {result['jax']}, every step ran"),
      file=sys.stderr)
sys.exit(1 if problems else 0)
PYEOF
