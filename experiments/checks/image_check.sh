#!/usr/bin/env bash
# The container image check (make test-image): build the image from the Containerfile with
# podman on a local Debian base (no registry needed), then inside it, with no network:
#   - the user is not root, and no compiler, assembler or make is on the PATH;
#   - `jaxrl-async train` runs PPO on CartPole-v1 for 3 updates into the /app/runs volume, and a
#     second container finds the run there and JAX's compilation cache in the /cache volume, and
#     a third trains the same again (its compile time, from that cache, is printed);
#   - EnvPool's Atari ROMs and wandb are there, and the notebooks (notebooks/, mounted read-only)
#     run top to bottom, cell by cell, as the test suite runs them (3 updates each).
# It prints the image size and one JSON line of figures, and exits non-zero on any failure.
#
#     bash experiments/checks/image_check.sh [--fresh]       (make test-image)
#
# --fresh: build from nothing (a new Debian base, no cached layers) to time it.
# Needs root, podman, runc and debootstrap (apt-get install podman runc debootstrap). The base
# image ($JRA_IMAGE_BASE, default localhost/debian:bookworm) is made with debootstrap from the
# default Debian mirror when missing. Behind a TLS-intercepting proxy, the CA bundle named by
# PIP_CERT (or SSL_CERT_FILE) is mounted into the build for pip.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

TAG="${JRA_IMAGE_TAG:-localhost/jaxrl_async:check}"
BASE_IMAGE="${JRA_IMAGE_BASE:-localhost/debian:bookworm}"
STEPS=$((4 * 128 * 3))  # 3 updates of 4 envs x 128 steps
FRESH=0
[[ "${1:-}" == "--fresh" ]] && FRESH=1

fail() { echo "image_check: FAILED: $1" >&2; exit 1; }
step() { echo "image_check: $1" >&2; }
now() { date +%s; }
since() { echo $(( $(now) - $1 )); }

for tool in podman runc; do
    command -v "$tool" >/dev/null || fail "$tool is not installed (apt-get install podman runc debootstrap)"
done
# runc and cgroupfs: crun fails on hybrid cgroups, and systemd may not be running.
P=(podman --runtime runc --cgroup-manager=cgroupfs)
if [[ -z "${CONTAINERS_CONF:-}" && ! -e /etc/containers/containers.conf ]]; then
    # the runtime may not be allowed to raise RLIMIT_NOFILE to podman's default
    CONTAINERS_CONF="$(mktemp)"
    printf '[containers]\ndefault_ulimits = []\n' > "$CONTAINERS_CONF"
    export CONTAINERS_CONF
fi

RUNS_VOL="jra-check-runs-$$"
CACHE_VOL="jra-check-cache-$$"
cleanup() {
    "${P[@]}" volume rm -f "$RUNS_VOL" "$CACHE_VOL" >/dev/null 2>&1 || true
    [[ -n "${ROOTFS_DIR:-}" ]] && rm -rf "$ROOTFS_DIR"
    return 0
}
trap cleanup EXIT

# ---------------------------------------------------------------- the base and the build
if (( FRESH )); then
    "${P[@]}" rmi -f "$TAG" "$BASE_IMAGE" >/dev/null 2>&1 || true
fi
BASE_S=0
if ! "${P[@]}" image exists "$BASE_IMAGE"; then
    command -v debootstrap >/dev/null || fail "debootstrap is not installed (needed once for $BASE_IMAGE)"
    step "making $BASE_IMAGE with debootstrap"
    t=$(now)
    ROOTFS_DIR="$(mktemp -d)"
    debootstrap --variant=minbase bookworm "$ROOTFS_DIR/rootfs" >/dev/null \
        || fail "debootstrap bookworm"
    tar -C "$ROOTFS_DIR/rootfs" -c . | "${P[@]}" import - "$BASE_IMAGE" >/dev/null
    rm -rf "$ROOTFS_DIR"
    BASE_S=$(since "$t")
fi

CERT_ARGS=()
CA="${PIP_CERT:-${SSL_CERT_FILE:-}}"
if [[ -n "$CA" && -f "$CA" ]]; then
    CERT_ARGS=(-v "$CA:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi
step "building $TAG on $BASE_IMAGE"
t=$(now)
BUILD_FLAGS=(--network host --build-arg "BASE=$BASE_IMAGE" "${CERT_ARGS[@]}" -t "$TAG" -f Containerfile)
(( FRESH )) && BUILD_FLAGS+=(--no-cache)
"${P[@]}" build "${BUILD_FLAGS[@]}" . || fail "podman build"
BUILD_S=$(since "$t")
SIZE_MB=$(( $("${P[@]}" image inspect --format '{{.Size}}' "$TAG") / 1000000 ))
step "image $TAG: $SIZE_MB MB (built in $BUILD_S s; base $BASE_S s)"

# ---------------------------------------------------------------- inside the image
"${P[@]}" volume create "$RUNS_VOL" >/dev/null
"${P[@]}" volume create "$CACHE_VOL" >/dev/null
RUN=("${P[@]}" run --rm --network none -v "$RUNS_VOL:/app/runs" -v "$CACHE_VOL:/cache")

USER_NAME=$("${RUN[@]}" "$TAG" sh -c 'echo "$(id -un) $(id -u)"')
[[ "$USER_NAME" =~ ^[a-z]+\ [0-9]+$ && "${USER_NAME#* }" != 0 ]] \
    || fail "the image runs as '$USER_NAME', not as a non-root user"
TOOLS=$("${RUN[@]}" "$TAG" sh -c \
    'for t in gcc cc c++ g++ clang make ld as cmake; do command -v $t || true; done')
[[ -z "$TOOLS" ]] || fail "build tools in the image: $TOOLS"
step "user: $USER_NAME; no build tools"

step "jaxrl-async train (3 updates)"
t=$(now)
"${RUN[@]}" "$TAG" jaxrl-async train --algo ppo --env CartPole-v1 --num-envs 4 --num-steps 128 \
    --total-timesteps "$STEPS" --run-dir runs/check --no-progress || fail "jaxrl-async train"
TRAIN_S=$(since "$t")
CACHED=$("${RUN[@]}" "$TAG" sh -c 'test -s runs/check/metrics.jsonl && test -s runs/check/summary.json \
    && find /cache/jax -type f | wc -l') || fail "runs/check is not on the runs volume"
(( CACHED > 0 )) || fail "JAX's compilation cache (/cache/jax) is empty after training"
step "the same run again, in a new container: its compile from the cache volume"
"${RUN[@]}" "$TAG" jaxrl-async train --algo ppo --env CartPole-v1 --num-envs 4 --num-steps 128 \
    --total-timesteps "$STEPS" --run-dir runs/check_again --no-progress >/dev/null \
    || fail "jaxrl-async train, again"
COMPILE_S=$("${RUN[@]}" "$TAG" python -c "import json; print(*(round(json.load(open( \
f'runs/{d}/summary.json'))['compile_s'], 1) for d in ('check', 'check_again')))")
step "compile: $COMPILE_S s (the first run, the second)"

step "EnvPool's Atari and wandb"
"${RUN[@]}" "$TAG" python -c "import envpool, wandb; envpool.make_gymnasium('Pong-v5', \
num_envs=1).reset()" || fail "the extras (envpool's Atari ROMs, wandb)"

t=$(now)
for notebook in notebooks/*.ipynb; do  # each in its own process, as each has its own kernel
    step "$notebook, cell by cell (3 updates)"
    "${RUN[@]}" -i -v "$PWD/notebooks:/app/notebooks:ro" -e JRA_NOTEBOOK_STEPS="$STEPS" \
        -e JRA_NOTEBOOK_SEEDS=1 -e JRA_NOTEBOOK_RUNS=/app/runs/notebooks "$TAG" \
        python - "$notebook" <<'EOF' || fail "$notebook"
import json, sys
cells = [c for c in json.load(open(sys.argv[1]))["cells"] if c["cell_type"] == "code"]
namespace = {"__name__": "__main__"}
for i, cell in enumerate(cells, 1):
    print(f"--- {sys.argv[1]} cell {i}/{len(cells)}", flush=True)
    exec(compile("".join(cell["source"]), f"{sys.argv[1]}, cell {i}", "exec"), namespace)
EOF
done
NOTEBOOKS_S=$(since "$t")

printf '{"check": "image", "image": "%s", "base": "%s", "size_mb": %d, "build_s": %s, "base_s": %s, "fresh": %s, "train_s": %s, "compile_s": [%s], "notebooks_s": %s, "user": "%s", "load": "%s"}\n' \
    "$TAG" "$BASE_IMAGE" "$SIZE_MB" "$BUILD_S" "$BASE_S" "$( ((FRESH)) && echo true || echo false)" \
    "$TRAIN_S" "${COMPILE_S/ /, }" "$NOTEBOOKS_S" "${USER_NAME% *}" "$(cut -d' ' -f1-3 /proc/loadavg)"
