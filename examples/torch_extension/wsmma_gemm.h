// Host interface of the warp-specialized mma.sync GEMM (wsmma_gemm.cu). Plain C++ with no CUDA or
// torch types, so that the torch binding (binding.cpp, compiled by the host compiler) and any other
// program can call it. C = A·Bᵀ: A (M, K), B (N, K), C (M, N), all bf16, row-major.
#pragma once
#include <cstdint>

namespace wsmma {

constexpr int kTileM = 128, kTileN = 96, kTileK = 32;   // one output tile per CTA
constexpr int kStages = 5;                                // shared-memory ring of k-blocks
constexpr int kConsumerWarps = 4;                         // math warps, a 64x48 block of the tile each
constexpr int kThreads = 32 * (1 + kConsumerWarps);       // plus one loader warp
constexpr int kSmemBytes = kStages * (kTileM + kTileN) * kTileK * 2;  // 70 KiB: two CTAs per SM
constexpr int kRegionsPerCta = 2;                         // recording warps: the loader and one math warp

struct Plan {
  int64_t ctas;             // CTAs launched (one per output tile)
  int32_t regions_per_cta;  // the profiler's slots per CTA
  int32_t capacity;         // spans one recording warp may write at this K
};

// Check the shape and size the launch. Returns 0, or 1 with a one-sentence message in `err`.
int plan(int64_t m, int64_t n, int64_t k, Plan* plan, char* err, int errlen);

// Launch on `stream` (a cudaStream_t). With `profile`, the profiled build records into the buffer
// (the fields of gemmtrace::ProfileBuffer); otherwise the plain build runs and they are ignored.
// Returns 0, or 1 with a one-sentence message in `err`.
int launch(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, bool profile, uint32_t* prof_data,
           uint32_t prof_capacity, uint32_t prof_regions_per_cta, void* stream, char* err, int errlen);

}  // namespace wsmma
