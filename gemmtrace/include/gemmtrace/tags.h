// gemmtrace: the one list of warp roles and span tags.
//
// Both the device code (profiler.cuh) and the Python package (gemmtrace/tags.py) read this file,
// so a tag is declared exactly once. Python parses the X(...) lines below with a regular
// expression: keep one entry per line, in the form shown.
//
//   GT_ROLE(ENUM_NAME, id, "trace name")
//   GT_TAG (ENUM_NAME, id, "trace name", "group")
//
// A tag's group says what a consumer/MMA warp is doing while the span is open; the analysis uses it
// to attribute tensor-core gaps: wait (for data, a free stage or another CTA's partial tile), issue
// (TMA or other async work), mma, epilogue (including a split tile's fix-up: storing a partial,
// adding partials), schedule, setup.
#pragma once

#define GEMMTRACE_ROLES(X)                 \
  X(PRODUCER, 0, "producer")               \
  X(CONSUMER, 1, "consumer")               \
  X(EPILOGUE, 2, "epilogue")               \
  X(SCHEDULER, 3, "scheduler")

#define GEMMTRACE_TAGS(X)                                   \
  X(SETUP, 1, "setup", "setup")                             \
  X(WAIT_EMPTY, 2, "wait_empty", "wait")                    \
  X(TMA_ISSUE, 3, "tma_issue", "issue")                     \
  X(WAIT_FULL, 4, "wait_full", "wait")                      \
  X(MMA, 5, "mma", "mma")                                   \
  X(EPILOGUE, 6, "epilogue", "epilogue")                    \
  X(SCHED_CLAIM, 7, "sched_claim", "schedule")              \
  X(WAIT_ACCUM, 8, "wait_accum", "wait")                    \
  X(PARTIAL_STORE, 9, "partial_store", "epilogue")          \
  X(WAIT_PARTIAL, 10, "wait_partial", "wait")               \
  X(REDUCE, 11, "reduce", "epilogue")
