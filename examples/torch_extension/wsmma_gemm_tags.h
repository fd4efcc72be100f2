// The vocabulary of the warp-specialized mma.sync GEMM (wsmma_gemm.cu): its warp roles and span
// tags. The kernel turns the lists into enums (GEMMTRACE_DEFINE_VOCABULARY) and run.py hands the
// file to gemmtrace.capture(tags=...), so the trace names spans as the kernel does. One X(...)
// entry per line: gemmtrace.Tags.from_header reads them with a regular expression.
//
// Groups tell the analysis what a span means: "mma" keeps the tensor cores busy; the math warp's
// other spans explain the gaps between its MMAs (waiting for data, storing the tile).
#pragma once

#define WSMMA_ROLES(X)  \
  X(LOADER, 0, "loader") \
  X(MATH, 1, "math")

#define WSMMA_TAGS(X)                            \
  X(WAIT_FREE, 1, "wait_free", "wait")           \
  X(LOAD, 2, "load", "issue")                    \
  X(WAIT_LANDED, 3, "wait_landed", "wait")       \
  X(WAIT_DATA, 4, "wait_data", "wait")           \
  X(MMA, 5, "mma", "mma")                        \
  X(STORE, 6, "store", "epilogue")
