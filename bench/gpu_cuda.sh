#!/usr/bin/env bash
# The torch backend on CUDA in one command, for a lent GPU machine that has torch, transformers and
# CUDA's compiler but no network: installs the wheels carried in .whl/ (made by
# bench/gpu_cuda_wheels.sh) into /tmp/site, then runs bench/gpu_cuda.py, which writes
# $OUT/gpu_cuda.json (or bench/results/gpu_cuda.json) and prints a table last.
# Arguments go to gpu_cuda.py (--quick, --device cpu, --no-modelopt-ext, --budget-s N ...).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${GPU_CUDA_SITE:-/tmp/site}

if compgen -G ".whl/*.whl" >/dev/null; then
  # A carried wheel fills what the image lacks: one whose package the image already has at that
  # version or newer is left out (typing_extensions is carried for pydantic, in case it is older).
  wheels=$("$PY" - .whl/*.whl <<'PYEOF'
import sys
from importlib import metadata
try:
    from packaging.utils import parse_wheel_filename
    from packaging.version import Version
except ImportError:  # pip, which installs them below, vendors packaging
    from pip._vendor.packaging.utils import parse_wheel_filename
    from pip._vendor.packaging.version import Version

for path in sys.argv[1:]:
    name, version, _, _ = parse_wheel_filename(path.rsplit("/", 1)[-1])
    try:
        have = Version(metadata.version(name))
    except metadata.PackageNotFoundError:
        have = None
    if have is not None and have >= version:
        print(f"gpu_cuda: the image has {name} {have}; not installing {path}", file=sys.stderr)
    else:
        print(path)
PYEOF
  ) || { echo "gpu_cuda: could not sort the carried wheels"; exit 1; }
  if [ -n "$wheels" ]; then
    # shellcheck disable=SC2086 - one wheel path per word
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $wheels \
      || { echo "gpu_cuda: installing the carried wheels failed"; exit 1; }
  fi
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "gpu_cuda: no .whl/ folder: running with the packages already installed"
fi
export PYTHONUNBUFFERED=1
exec "$PY" bench/gpu_cuda.py "$@"
