// gemmtrace intra-kernel profiler: spans per warp role, recorded into a device buffer.
//
//   gemmtrace::Recorder<kProfile> rec;
//   rec.init(prof, /*slot=*/0, gemmtrace::Role::CONSUMER);   // once per recording warp
//   uint32_t t = rec.now();
//   ... work ...
//   rec.record(gemmtrace::Tag::MMA, t, tile, kblock);      // one 16-byte store by lane 0
//   rec.finish();                                          // writes the region header
//
// Design (see docs/profiler.md and gemmtrace/trace.py, which decodes the same layout):
// - Each recording warp owns one region of the buffer: a 64-byte header and `capacity` 16-byte
//   records. The next free slot is a register counter, so the hot path has no atomics.
// - The recorder holds five registers (region, count, capacity, the low word of the base cycle
//   count, lane 0 or not): init() writes the header's fixed fields at once instead of keeping
//   them, which matters in a consumer warpgroup with 128 accumulators and 40 registers to spare.
// - Times on the hot path are SM cycles (%clock64), as offsets from the warp's cycle count at
//   init. init() and finish() also read %globaltimer (ns, the same clock on every SM), and the
//   header keeps both pairs, so the host maps each warp's cycles onto global nanoseconds by linear
//   interpolation: spans get the cycle counter's resolution (0.5 ns at 1.98 GHz) instead of
//   %globaltimer's 32 ns steps, and still line up across SMs.
// - A record is {start, end, tile, tag | kblock << 8}: four 32-bit words, written by lane 0 with
//   one predicated st.global.v4. 32-bit cycle offsets cover 2.1 s at 1.98 GHz.
// - A full region keeps counting: the header's count minus capacity is the number dropped, which
//   the host reports. Nothing is lost silently.
// - Recorder<false> has no state and empty inline methods: a kernel built with the profiler off
//   compiles to the code it would have without it (tests/test_build.py checks the PTX).
// - Call every method from the whole warp (warp-uniform) or at least from lane 0: lane 0 stores.
#pragma once
#include <cstdint>

#include "tags.h"

namespace gemmtrace {

enum class Role : uint32_t {
#define GEMMTRACE_ROLE_ENUM(name, id, str) name = id,
  GEMMTRACE_ROLES(GEMMTRACE_ROLE_ENUM)
#undef GEMMTRACE_ROLE_ENUM
};

enum class Tag : uint32_t {
#define GEMMTRACE_TAG_ENUM(name, id, str, group) name = id,
  GEMMTRACE_TAGS(GEMMTRACE_TAG_ENUM)
#undef GEMMTRACE_TAG_ENUM
};

constexpr uint32_t kHeaderWords = 16;
constexpr uint32_t kRecordWords = 4;
constexpr uint32_t kMagic = 0x47545231u;  // "GTR1"
constexpr uint32_t kNoTile = 0xFFFFFFFFu;
constexpr uint32_t kNoKBlock = 0xFFFFFFu;

// What the host passes to a profiled kernel (by value). Sized by the host from the launch:
// num_regions = CTAs x regions_per_cta, capacity = records each recording warp may write.
struct ProfileBuffer {
  uint32_t* data;
  uint32_t capacity;
  uint32_t regions_per_cta;
};

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t clock_cycles() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t smid() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

template <bool kEnabled>
struct Recorder;

// Profiler off: nothing to hold, nothing to do.
template <>
struct Recorder<false> {
  __device__ __forceinline__ void init(const ProfileBuffer&, uint32_t, Role) {}
  __device__ __forceinline__ uint32_t now() const { return 0; }
  __device__ __forceinline__ uint32_t record(Tag, uint32_t, uint32_t = kNoTile, uint32_t = kNoKBlock) { return 0; }
  __device__ __forceinline__ void record_span(Tag, uint32_t, uint32_t, uint32_t = kNoTile, uint32_t = kNoKBlock) {}
  __device__ __forceinline__ void finish() {}
};

template <>
struct Recorder<true> {
  uint32_t* region_ = nullptr;
  uint32_t base_clk_ = 0;  // low word of %clock64 at init: span times are cycles since then
  uint32_t count_ = 0;
  uint32_t capacity_ = 0;
  bool leader_ = false;

  // header: [0-1 base ns (%globaltimer), 2 magic, 3 smid, 4 cta, 5 warp | role << 16, 6 count,
  //          7 capacity, 8-9 base cycles (%clock64), 10-11 end cycles, 12-13 end ns, 14-15 zero]
  __device__ __forceinline__ void init(const ProfileBuffer& buf, uint32_t slot, Role role) {
    const uint32_t cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const uint64_t region = uint64_t(cta) * buf.regions_per_cta + slot;
    region_ = buf.data + region * (kHeaderWords + uint64_t(buf.capacity) * kRecordWords);
    capacity_ = buf.capacity;
    count_ = 0;
    leader_ = (threadIdx.x % 32) == 0;
    const uint64_t ns = globaltimer_ns(), clk = clock_cycles();
    base_clk_ = uint32_t(clk);
    if (leader_) {  // the magic word stays 0 until finish(): an unfinished region is never decoded
      uint32_t* h = region_;
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(h), "r"(uint32_t(ns)), "r"(uint32_t(ns >> 32)),
                   "r"(0u), "r"(smid())
                   : "memory");
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(h + 4), "r"(cta),
                   "r"((threadIdx.x / 32) | (uint32_t(role) << 16)), "r"(0u), "r"(capacity_)
                   : "memory");
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(h + 8), "r"(uint32_t(clk)), "r"(uint32_t(clk >> 32)),
                   "r"(0u), "r"(0u)
                   : "memory");
    }
  }

  // Cycles since init (modulo 2^32); the start of a span. Warps that never called init() read no
  // clock (region_ is warp-uniform, so this is a uniform branch, not divergence).
  __device__ __forceinline__ uint32_t now() const {
    return region_ == nullptr ? 0u : uint32_t(clock_cycles()) - base_clk_;
  }

  // Close a span that started at `start` (from now()) and store it; returns the span's end.
  __device__ __forceinline__ uint32_t record(Tag tag, uint32_t start, uint32_t tile = kNoTile,
                                             uint32_t kblock = kNoKBlock) {
    if (region_ == nullptr) return 0;
    const uint32_t end = now();
    record_span(tag, start, end, tile, kblock);
    return end;
  }

  // Store a span whose end the caller already read with now(): lets a loop take one timer read
  // per boundary (the end of one span is the start of the next) instead of two.
  __device__ __forceinline__ void record_span(Tag tag, uint32_t start, uint32_t end, uint32_t tile = kNoTile,
                                              uint32_t kblock = kNoKBlock) {
    if (region_ == nullptr) return;
    // One predicated 16-byte store by lane 0: no branch (the warp never diverges), no "memory"
    // clobber (nothing in the kernel reads the buffer, so the compiler may keep scheduling freely),
    // and .cs (streaming, evict-first) so the trace does not push the kernel's operands out of L2.
    uint32_t* rec = region_ + kHeaderWords + min(count_, capacity_ - 1) * kRecordWords;
    const uint32_t word3 = uint32_t(tag) | (kblock << 8);
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\n}" ::"l"(rec),
        "r"(start), "r"(end), "r"(tile), "r"(word3), "r"(uint32_t(leader_ && count_ < capacity_)));
    ++count_;
  }

  // The end pair and the count, then the magic word last: a region without it is one whose warp
  // never finished.
  __device__ __forceinline__ void finish() {
    if (region_ == nullptr || !leader_) return;
    const uint64_t clk = clock_cycles(), ns = globaltimer_ns();
    uint32_t* h = region_;
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(h + 10), "r"(uint32_t(clk)), "r"(uint32_t(clk >> 32)) : "memory");
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(h + 12), "r"(uint32_t(ns)), "r"(uint32_t(ns >> 32)) : "memory");
    asm volatile("st.global.u32 [%0], %1;" ::"l"(h + 6), "r"(count_) : "memory");
    asm volatile("st.global.u32 [%0], %1;" ::"l"(h + 2), "r"(kMagic) : "memory");
  }
};

}  // namespace gemmtrace
