#!/usr/bin/env bash
# GPU smoke test of the trtllm backend: the built-in tiny Llama, FP8, one GPU, end to end
# (modelopt on CUDA -> trtllm-build -> tritonserver's tensorrtllm backend -> LoadGen -> ROUGE).
# Run on a machine where tensorrt_llm imports and tritonserver with the tensorrtllm backend is
# installed (e.g. NVIDIA's tritonserver:<ver>-trtllm-python-py3 container, perfdag installed with
# `pip install -c constraints/trtllm-<release>.txt -e .`). It first prints the versions it runs
# with, so a result can be tied to them; elsewhere it says why it skipped and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

echo "gpu_smoke: versions"
"$PY" - <<'PYEOF' || true
import platform
from importlib import metadata

def v(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"

print(f"  python          {platform.python_version()}")
cuda = "?"
try:
    import torch
    cuda = f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s) visible"
except Exception as e:  # report, do not fail: this is a version listing
    cuda = f"torch does not import: {e}"
print(f"  torch           {v('torch')} ({cuda})")
for dist in ("transformers", "nvidia-modelopt", "tensorrt_llm", "tensorrt", "tritonclient", "perfdag"):
    print(f"  {dist:<15} {v(dist)}")
PYEOF
if [ -n "${NVIDIA_TRITON_SERVER_VERSION:-}" ]; then
  echo "  tritonserver    ${NVIDIA_TRITON_SERVER_VERSION} (NVIDIA_TRITON_SERVER_VERSION)"
elif [ -f /opt/tritonserver/TRITON_VERSION ]; then
  echo "  tritonserver    $(cat /opt/tritonserver/TRITON_VERSION) (/opt/tritonserver/TRITON_VERSION)"
else
  echo "  tritonserver    unknown (no NVIDIA_TRITON_SERVER_VERSION, no /opt/tritonserver/TRITON_VERSION)"
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader | sed 's/^/  gpu             /'
else
  echo "  gpu             none visible (nvidia-smi -L failed or absent)"
fi

if ! why=$("$PY" -c "import tensorrt_llm" 2>&1); then
  echo "gpu_smoke: skipped: tensorrt_llm does not import here ($(echo "$why" | tail -n 1)); run it inside NVIDIA's TensorRT-LLM container"
  exit 0
fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_smoke: skipped: no NVIDIA GPU visible (nvidia-smi -L failed)"
  exit 0
fi
if [ ! -x /opt/tritonserver/bin/tritonserver ] && ! command -v tritonserver >/dev/null; then
  echo "gpu_smoke: skipped: no tritonserver with the tensorrtllm backend (/opt/tritonserver/bin/tritonserver)"
  exit 0
fi
export PERFDAG_ARTIFACTS=${PERFDAG_ARTIFACTS:-artifacts-gpu-smoke}
"$PY" -m pipeline status --params-file params/examples/tiny-trtllm-1gpu.yaml
"$PY" -m luigi --module pipeline FullRun --local-scheduler --params-file params/examples/tiny-trtllm-1gpu.yaml
