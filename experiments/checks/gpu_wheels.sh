#!/usr/bin/env bash
# The wheels a GPU machine without a package index lacks, downloaded here (where there is one)
# into a folder to copy there for experiments/checks/accelerator_check.sh (JAXRL_WHEELS=FOLDER
# JAXRL_OFFLINE=1).
#
#     bash experiments/checks/gpu_wheels.sh [FOLDER]          (default ./wheels)
#
# What is downloaded: the build backend (setuptools), this project's dependencies and those of
# the extras in
# $JAXRL_ACCEL_EXTRAS (default bench,optuna: rejax, distrax, flashbax, optuna and what they
# pull in), resolved
# for CPython $JAXRL_WHEEL_PYTHON (default 3.12) on manylinux x86_64 (glibc 2.$JAXRL_WHEEL_GLIBC_MINOR,
# default 2.35, or older), binary wheels only, with the packages the GPU image already has pinned
# to its versions ($JAXRL_IMAGE_PINS, default the H200 image of 2026-12-04: jax 0.11.2, flax
# 0.12.10, optax 0.2.8, chex 0.1.92, numpy 2.5.2, orbax-checkpoint 0.12.4). The jax and jaxlib
# wheels themselves are then removed: the machine's CUDA jax is the one used, and the folder
# can never offer another. Prints the folder's wheels, one line each.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$ROOT/wheels}"
PYV="${JAXRL_WHEEL_PYTHON:-3.12}"
GLIBC_MINOR="${JAXRL_WHEEL_GLIBC_MINOR:-35}"
EXTRAS="${JAXRL_ACCEL_EXTRAS:-bench,optuna}"
PINS="${JAXRL_IMAGE_PINS:-jax==0.11.2 jaxlib==0.11.2 flax==0.12.10 optax==0.2.8 chex==0.1.92 numpy==2.5.2 orbax-checkpoint==0.12.4}"
PYTHON="${PYTHON:-python3}"

platforms=(--platform manylinux2014_x86_64)  # every manylinux tag up to glibc 2.GLIBC_MINOR
for minor in $(seq 17 "$GLIBC_MINOR"); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
mkdir -p "$OUT"
work="$(mktemp -d)"
tr ' ' '\n' <<<"$PINS" > "$work/image.txt"
# The requirements: pyproject's dependencies and the extras' (jaxrl_async[a,b] expanded).
"$PYTHON" - "$ROOT/pyproject.toml" "$EXTRAS" > "$work/requirements.txt" <<'PYEOF'
import re, sys, tomllib
pyproject = tomllib.loads(open(sys.argv[1], "rb").read().decode())
project = pyproject["project"]
optional = project.get("optional-dependencies", {})
def expand(extra):
    for req in optional[extra]:
        inner = re.fullmatch(r"jaxrl_async\[(.*)\]", req.replace(" ", ""))
        yield from (r for e in inner.group(1).split(",") for r in expand(e)) if inner else [req]
extras = [e for e in sys.argv[2].split(",") if e]
unknown = [e for e in extras if e not in optional]
if unknown:
    sys.exit(f"gpu_wheels: extras {unknown} are not in pyproject.toml; allowed: {sorted(optional)}")
# The build backend too: pip builds this checkout (pip install -e) from the folder as well.
print("\n".join([*pyproject["build-system"]["requires"], *project["dependencies"],
                 *(r for e in extras for r in expand(e))]))
PYEOF
"$PYTHON" -m pip download --quiet --disable-pip-version-check --dest "$OUT" \
    --only-binary=:all: --python-version "$PYV" --implementation cp --abi "cp${PYV/./}" \
    "${platforms[@]}" -c "$work/image.txt" -r "$work/requirements.txt"
rm -f "$OUT"/jax-[0-9]*.whl "$OUT"/jaxlib-*.whl
ls "$OUT"/*.whl | sed 's#.*/##' | sort
echo "gpu_wheels: $(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1), in $OUT" \
    "(CPython $PYV, manylinux x86_64 up to glibc 2.$GLIBC_MINOR; jax and jaxlib left out)" >&2
