"""gemmtrace: see inside GEMM kernels (intra-kernel profiler, instrumented kernels, trace analysis).

    import gemmtrace as gt
    with gt.capture(ctas=grid, regions_per_cta=3, capacity=4096, tags="my_tags.h") as prof:
        launch(..., prof.buffer)
    run = prof.run(name="my_gemm", shape=(M, N, K))
    run.save("runs/my_gemm")
"""
from .capture import Capture, GemmtraceWarning, ProfileBufferStruct, capture
from .importer import import_raw
from .paths import INCLUDE_DIR, GemmtraceError
from .tags import Tags
from .timing import benchmark
from .trace import Run, load

__all__ = ["Capture", "GemmtraceError", "GemmtraceWarning", "INCLUDE_DIR", "ProfileBufferStruct", "Run", "Tags",
           "benchmark", "capture", "import_raw", "load"]
__version__ = "0.1.0"
