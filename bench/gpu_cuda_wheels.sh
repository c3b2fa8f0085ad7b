#!/usr/bin/env bash
# Downloads into .whl/ the wheels bench/gpu_cuda.sh installs on a GPU machine whose image has torch
# and transformers but neither modelopt nor what modelopt and perfdag's config import: Python 3.12,
# manylinux x86_64, each at the version constraints/cpu.txt pins (the CPU quick start's, tested).
# The folder is git-ignored (/.whl/ in .git/info/exclude); carry it with the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# modelopt, its requirements the image lacks (pulp, omegaconf, pydantic and pydantic's own)
NAMES="nvidia-modelopt pulp omegaconf pydantic pydantic-core annotated-types typing-inspection typing-extensions"
pins=()
for n in $NAMES; do
  pin=$(grep -i "^$n==" constraints/cpu.txt) || { echo "gpu_cuda_wheels: $n is not pinned in constraints/cpu.txt" >&2; exit 1; }
  pins+=("$pin")
done
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${pins[@]}"
du -sh .whl
