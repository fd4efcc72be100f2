// The vocabulary of the warp-specialized Hopper GEMM (ws_gemm.cu): its warp roles and span tags.
// The kernel turns the lists into enums (GEMMTRACE_DEFINE_VOCABULARY), run.py hands the file to
// gemmtrace.capture(tags=...), and the C++ example (examples/cpp_only) names it in its raw capture
// for `gemmtrace import`. One X(...) entry per line: gemmtrace.Tags.from_header reads them with a
// regular expression.
//
// Groups tell the analysis what a span means: "mma" keeps the tensor cores busy; the math
// warpgroup's other spans explain the gaps between its MMAs (waiting for a stage, storing the tile).
#pragma once

#define WS_GEMM_ROLES(X) \
  X(TMA, 0, "tma")       \
  X(MATH, 1, "math")

#define WS_GEMM_TAGS(X)                       \
  X(SETUP, 1, "setup", "setup")               \
  X(WAIT_SLOT, 2, "wait_slot", "wait")        \
  X(LOAD, 3, "load", "issue")                 \
  X(WAIT_STAGE, 4, "wait_stage", "wait")      \
  X(MMA, 5, "mma", "mma")                     \
  X(STORE, 6, "store", "epilogue")
