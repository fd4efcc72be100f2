// gemmtrace intra-kernel profiler: %globaltimer spans per warp, recorded into a device buffer.
//
//   gemmtrace::Recorder<kProfile> rec;
//   rec.init(prof, /*slot=*/0, gemmtrace::Role::CONSUMER);   // once per recording warp
//   uint32_t t = rec.now();
//   ... work ...
//   rec.record(gemmtrace::Tag::MMA, t, tile, kblock);      // one 16-byte store by lane 0
//   rec.finish();                                          // writes the region header
//
// Design (see docs/profiler.md and gemmtrace/trace.py, which decodes the same layout):
// - Each recording warp owns one region of the buffer: a 32-byte header and `capacity` 16-byte
//   records. The next free slot is a register counter, so the hot path has no atomics.
// - A record is {start - base, end - base, tile, tag | kblock << 8}: four 32-bit words, written by
//   lane 0 with one st.global.v4. `base` is the warp's %globaltimer at init, kept in the header, so
//   offsets fit 32 bits for kernels up to 4.29 s.
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

constexpr uint32_t kHeaderWords = 8;
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
  uint64_t base_ = 0;
  uint32_t count_ = 0;
  uint32_t capacity_ = 0;
  uint32_t header_ = 0;  // warp | role << 16
  bool leader_ = false;

  __device__ __forceinline__ void init(const ProfileBuffer& buf, uint32_t slot, Role role) {
    const uint32_t cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const uint64_t region = uint64_t(cta) * buf.regions_per_cta + slot;
    region_ = buf.data + region * (kHeaderWords + uint64_t(buf.capacity) * kRecordWords);
    capacity_ = buf.capacity;
    count_ = 0;
    header_ = (threadIdx.x / 32) | (uint32_t(role) << 16);
    leader_ = (threadIdx.x % 32) == 0;
    base_ = globaltimer_ns();
  }

  // Time since init, in ns; the start of a span. Warps that never called init() read no timer
  // (region_ is warp-uniform, so this is a uniform branch, not divergence).
  __device__ __forceinline__ uint32_t now() const {
    return region_ == nullptr ? 0u : uint32_t(globaltimer_ns() - base_);
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
    // One predicated 16-byte store by lane 0: no branch (the warp never diverges) and no "memory"
    // clobber (nothing in the kernel reads the buffer, so the compiler may keep scheduling freely).
    uint32_t* rec = region_ + kHeaderWords + min(count_, capacity_ - 1) * kRecordWords;
    const uint32_t word3 = uint32_t(tag) | (kblock << 8);
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.v4.u32 [%0], {%1, %2, %3, %4};\n}" ::"l"(rec),
        "r"(start), "r"(end), "r"(tile), "r"(word3), "r"(uint32_t(leader_ && count_ < capacity_)));
    ++count_;
  }

  // Write the header last, so a region without the magic word is one whose warp never finished.
  __device__ __forceinline__ void finish() {
    if (!leader_) return;
    uint32_t* h = region_;
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(h + 4), "r"(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)),
                 "r"(header_), "r"(count_), "r"(capacity_)
                 : "memory");
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(h), "r"(uint32_t(base_)),
                 "r"(uint32_t(base_ >> 32)), "r"(kMagic), "r"(smid())
                 : "memory");
  }
};

}  // namespace gemmtrace
