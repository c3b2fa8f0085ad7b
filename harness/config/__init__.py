"""Parameter schema and resolution (no luigi here)."""
from harness.config.resolve import ENV_FLAGS, ParamsError, resolve
from harness.config.schema import CPU_QUANT_FORMATS, GPU_ONLY_QUANT_FORMATS, SECTIONS, Params

__all__ = ["ENV_FLAGS", "ParamsError", "resolve", "CPU_QUANT_FORMATS", "GPU_ONLY_QUANT_FORMATS", "SECTIONS", "Params"]
