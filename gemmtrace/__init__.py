"""gemmtrace: see inside GEMM kernels (intra-kernel profiler, instrumented kernels, trace analysis)."""
from .paths import GemmtraceError
from .trace import Run, load

__all__ = ["GemmtraceError", "Run", "load"]
__version__ = "0.1.0"
