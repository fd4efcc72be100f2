// gemmtrace intra-kernel profiler: spans per warp role, recorded into a device buffer.
//
//   gemmtrace::Recorder<kProfile> rec;                     // or Recorder<kProfile, kRing>: staged
//   rec.init(prof, /*slot=*/0, gemmtrace::Role::CONSUMER);   // once per recording warp (staged: + smem)
//   uint32_t t = rec.now();
//   ... work ...
//   rec.record(gemmtrace::Tag::MMA, t, tile, kblock);      // one 16-byte store by lane 0
//   rec.poll();                                            // staged: copy full halves of the ring out
//   rec.finish();                                          // writes the region header
//
// Design (see docs/profiler.md and gemmtrace/trace.py, which decodes the same layout):
// - Each recording warp owns one region of the buffer: a 64-byte header and `capacity` 16-byte
//   records. Each warp counts its own records, so the hot path has no atomics.
// - Two ways to get records there, one layout. The direct recorder stores each record to global
//   memory (one predicated st.global.v4 by lane 0) and holds four registers (region, count,
//   capacity, zero outside lane 0). The staged recorder stores each record to a ring in shared
//   memory (st.shared.v4) and copies full halves of it out with cp.async.bulk at the kernel's
//   poll() points; it holds one register (the ring's address) and keeps its count in the ring's
//   header. v1-v4 use the direct one; v5-v10, whose hot loops felt the global stores, the staged one.
// - Times on the hot path are SM cycles: the low word of %clock64 as read, so no base is held in a
//   register (header word 14 says so: kRawClocks). init() and finish() also read %globaltimer (ns,
//   the same clock on every SM), and the header keeps both (cycles, ns) pairs, so the host takes
//   each time's offset from the base cycles (modulo 2^32) and maps it onto global nanoseconds by
//   linear interpolation: spans get the cycle counter's resolution (0.5 ns at 1.98 GHz) instead of
//   %globaltimer's 32 ns steps, and still line up across SMs.
// - A record is {start, end, tile, tag | kblock << 8}: four 32-bit words. 32-bit cycle offsets
//   cover 2.1 s at 1.98 GHz.
// - A full region keeps counting: the header's count minus capacity is the number dropped, which
//   the host reports. Nothing is lost silently.
// - Recorder<false> has no state and empty inline methods: a kernel built with the profiler off
//   compiles to the code it would have without it (tests/test_build.py checks the PTX).
// - Call every method from the whole warp (warp-uniform) or at least from lane 0: lane 0 stores.
#pragma once
#include <cstdint>

#include "tags.h"

namespace gemmtrace {

// A kernel's vocabulary: `enum class Role` and `enum class Tag` in the current namespace, from two
// X-macro lists in the form of tags.h (a user header declares its own; Python reads the same file
// with gemmtrace.Tags.from_header). Any enum works with the recorder: ids are all it stores
// (a role id in 16 bits of the region header, a tag id in 8 bits of each record: 1..255).
#define GEMMTRACE_ROLE_ENUM_ENTRY_(name, id, str) name = id,
#define GEMMTRACE_TAG_ENUM_ENTRY_(name, id, str, group) name = id,
#define GEMMTRACE_DEFINE_VOCABULARY(ROLES, TAGS)  \
  enum class Role : uint32_t { ROLES(GEMMTRACE_ROLE_ENUM_ENTRY_) }; \
  enum class Tag : uint32_t { TAGS(GEMMTRACE_TAG_ENUM_ENTRY_) }

// gemmtrace's own kernels' vocabulary (tags.h): gemmtrace::Role, gemmtrace::Tag.
GEMMTRACE_DEFINE_VOCABULARY(GEMMTRACE_ROLES, GEMMTRACE_TAGS);

constexpr uint32_t kHeaderWords = 16;
constexpr uint32_t kRecordWords = 4;
constexpr uint32_t kMagic = 0x47545231u;  // "GTR1"
constexpr uint32_t kNoTile = 0xFFFFFFFFu;
constexpr uint32_t kNoKBlock = 0xFFFFFFu;
// Header word 14, a set of flags. kRawClocks: record times are %clock64's low words, not offsets
// from the base cycles (buffers written before this flag existed hold offsets and a zero here).
constexpr uint32_t kRawClocks = 1u;

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

// A recording warp's base time: the global timer and the cycle counter, read together. init() reads
// its own; given one read earlier, it lets a kernel set its recorders up later (under a barrier, say)
// and still record a span that starts at the stamp (uint32_t(stamp.clk) is that span's start).
struct ClockStamp {
  uint64_t ns, clk;
};
__device__ __forceinline__ ClockStamp clock_stamp() { return ClockStamp{globaltimer_ns(), clock_cycles()}; }

__device__ __forceinline__ uint32_t smid() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// One 16-byte global store (a header's quarter or a record), by the lane that calls it.
__device__ __forceinline__ void st_global_v4(uint32_t* p, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}

// kRing = 0: the direct recorder (each record one global store). kRing > 0: the staged recorder
// (records gathered in a ring of kRing records in shared memory, kSmemBytes per recording warp, and
// written out by bulk copies). Both write the same buffer layout.
template <bool kEnabled, int kRing = 0>
struct Recorder;

// Profiler off: nothing to hold, nothing to do.
template <int kRing>
struct Recorder<false, kRing> {
  static constexpr uint32_t kSmemBytes = 0;
  template <class RoleT>
  __device__ __forceinline__ void init(const ProfileBuffer&, uint32_t, RoleT, uint32_t = 0) {}
  template <class RoleT>
  __device__ __forceinline__ void init(const ProfileBuffer&, uint32_t, RoleT, uint32_t, ClockStamp) {}
  __device__ __forceinline__ uint32_t now() const { return 0; }
  template <class TagT>
  __device__ __forceinline__ uint32_t record(TagT, uint32_t, uint32_t = kNoTile, uint32_t = kNoKBlock) { return 0; }
  template <class TagT>
  __device__ __forceinline__ void record_span(TagT, uint32_t, uint32_t, uint32_t = kNoTile, uint32_t = kNoKBlock) {}
  __device__ __forceinline__ void poll() const {}
  __device__ __forceinline__ void finish() {}
};

template <>
struct Recorder<true, 0> {
  static constexpr uint32_t kSmemBytes = 0;
  uint32_t* region_ = nullptr;
  uint32_t count_ = 0;
  uint32_t capacity_ = 0;  // records this lane may store: the region's capacity in lane 0, 0 elsewhere

  // header: [0-1 base ns (%globaltimer), 2 magic, 3 smid, 4 cta, 5 warp | role << 16, 6 count,
  //          7 capacity, 8-9 base cycles (%clock64), 10-11 end cycles, 12-13 end ns, 14 flags, 15 zero]
  template <class RoleT>
  __device__ __forceinline__ void init(const ProfileBuffer& buf, uint32_t slot, RoleT role, uint32_t = 0) {
    init(buf, slot, role, 0u, clock_stamp());
  }
  template <class RoleT>
  __device__ __forceinline__ void init(const ProfileBuffer& buf, uint32_t slot, RoleT role, uint32_t, ClockStamp base) {
    const uint32_t cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const uint64_t region = uint64_t(cta) * buf.regions_per_cta + slot;
    region_ = buf.data + region * (kHeaderWords + uint64_t(buf.capacity) * kRecordWords);
    const bool leader = (threadIdx.x % 32) == 0;
    capacity_ = leader ? buf.capacity : 0u;
    count_ = 0;
    const uint64_t ns = base.ns, clk = base.clk;
    if (leader) {  // the magic word stays 0 until finish(): an unfinished region is never decoded
      uint32_t* h = region_;
      st_global_v4(h, uint32_t(ns), uint32_t(ns >> 32), 0u, smid());
      st_global_v4(h + 4, cta, (threadIdx.x / 32) | (uint32_t(role) << 16), 0u, buf.capacity);
      st_global_v4(h + 8, uint32_t(clk), uint32_t(clk >> 32), 0u, 0u);
    }
  }

  // The cycle counter's low word; the start of a span. Warps that never called init() read no
  // clock (region_ is warp-uniform, so this is a uniform branch, not divergence).
  __device__ __forceinline__ uint32_t now() const { return region_ == nullptr ? 0u : uint32_t(clock_cycles()); }

  // Close a span that started at `start` (from now()) and store it; returns the span's end.
  template <class TagT>
  __device__ __forceinline__ uint32_t record(TagT tag, uint32_t start, uint32_t tile = kNoTile,
                                             uint32_t kblock = kNoKBlock) {
    if (region_ == nullptr) return 0;
    const uint32_t end = now();
    record_span(tag, start, end, tile, kblock);
    return end;
  }

  // Store a span whose end the caller already read with now(): lets a loop take one timer read
  // per boundary (the end of one span is the start of the next) instead of two.
  template <class TagT>
  __device__ __forceinline__ void record_span(TagT tag, uint32_t start, uint32_t end, uint32_t tile = kNoTile,
                                              uint32_t kblock = kNoKBlock) {
    if (region_ == nullptr) return;
    // One predicated 16-byte store by lane 0 (the only lane with a capacity): no branch (the warp
    // never diverges), no "memory" clobber (nothing in the kernel reads the buffer, so the compiler
    // may keep scheduling freely), and .cs (streaming, evict-first) so the trace does not push the
    // kernel's operands out of L2. Other lanes compute an address they never store to.
    uint32_t* rec = region_ + kHeaderWords + count_ * kRecordWords;
    const uint32_t word3 = uint32_t(tag) | (kblock << 8);
    asm volatile(
        "{\n .reg .pred p;\n setp.lt.u32 p, %5, %6;\n @p st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\n}" ::"l"(rec),
        "r"(start), "r"(end), "r"(tile), "r"(word3), "r"(count_), "r"(capacity_));
    ++count_;
  }

  __device__ __forceinline__ void poll() const {}  // every record is already in the buffer

  // The end pair, the flags and the count, then the magic word last: a region without it is one
  // whose warp never finished.
  __device__ __forceinline__ void finish() {
    if (region_ == nullptr || threadIdx.x % 32 != 0) return;
    const uint64_t clk = clock_cycles(), ns = globaltimer_ns();
    uint32_t* h = region_;
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(h + 10), "r"(uint32_t(clk)), "r"(uint32_t(clk >> 32)) : "memory");
    st_global_v4(h + 12, uint32_t(ns), uint32_t(ns >> 32), kRawClocks, 0u);
    asm volatile("st.global.u32 [%0], %1;" ::"l"(h + 6), "r"(count_) : "memory");
    asm volatile("st.global.u32 [%0], %1;" ::"l"(h + 2), "r"(kMagic) : "memory");
  }
};


// The staged recorder, for kernels whose hot loops feel a global store (v5-v8: on the H100 one
// 16-byte st.global per k-block cost the persistent kernel 1.5%, a st.shared of the same record
// nothing measurable; bench/NOTES.md). Lane 0 keeps the region's header and a ring of kRing records
// in shared memory (kSmemBytes from `smem`, 16-byte aligned). record_span() only stores to the ring;
// poll(), which the kernel calls where it has registers to spare, copies each full half of the ring
// to the region with one cp.async.bulk; finish() stores the rest, then the header. Contract: poll
// at least once every kRing / 2 records (a debug build traps otherwise). Hot-path state is one
// register, the ring's address: the count, the region's address, its capacity and the count flushed
// so far wait in the shared header. (Held in registers, the count and a base cycle count were most
// of what the profiled 192x192 tile spilled: 232 bytes with them, 52 without, none of it now inside
// its k-loop; bench/NOTES.md.)
template <int kRing>
struct Recorder<true, kRing> {
  static_assert(kRing >= 2 && kRing % 2 == 0, "the ring is flushed in halves");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // Fires only where the staged recorder is used: the direct one works from sm_80 on.
  static_assert(kRing < 0, "gemmtrace: the staged recorder (Recorder<true, kRing>) needs sm_90 or newer "
                           "(cp.async.bulk); on this architecture use the direct recorder, Recorder<true>.");
#endif
  static constexpr uint32_t kHalf = kRing / 2;
  static constexpr uint32_t kSmemBytes = (kHeaderWords + kRing * kRecordWords) * 4;
  // Shared header: the global header's layout, except word 6 (records flushed so far; the count
  // only at finish), word 10 (records written so far; the end cycles only at finish) and words 14-15
  // (the region's address; the flags at finish).
  static constexpr uint32_t kFlushedAt = 24, kCapacityAt = 28, kCountAt = 40, kRegionAt = 56;
  uint32_t smem_ = 0;  // this warp's header, then its ring (0: a warp that does not record)

  static __device__ __forceinline__ bool leader() { return (threadIdx.x % 32) == 0; }
  static __device__ __forceinline__ void sts4(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
  }
  static __device__ __forceinline__ uint32_t lds(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
  }
  static __device__ __forceinline__ uint4 lds4(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
    return v;
  }
  static __device__ __forceinline__ void stg4(uint32_t* p, uint4 v) { st_global_v4(p, v.x, v.y, v.z, v.w); }
  __device__ __forceinline__ uint32_t count() const { return lds(smem_ + kCountAt); }
  __device__ __forceinline__ uint64_t region() const {
    uint32_t lo, hi;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "r"(smem_ + kRegionAt) : "memory");
    return (uint64_t(hi) << 32) | lo;
  }

  template <class RoleT>
  __device__ __forceinline__ void init(const ProfileBuffer& buf, uint32_t slot, RoleT role, uint32_t smem) {
    init(buf, slot, role, smem, clock_stamp());
  }
  template <class RoleT>
  __device__ __forceinline__ void init(const ProfileBuffer& buf, uint32_t slot, RoleT role, uint32_t smem, ClockStamp base) {
    const uint32_t cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const uint64_t region = uint64_t(cta) * buf.regions_per_cta + slot;
    const uint64_t addr = reinterpret_cast<uint64_t>(buf.data + region * (kHeaderWords + uint64_t(buf.capacity) * kRecordWords));
    smem_ = smem;
    const uint64_t ns = base.ns, clk = base.clk;
    if (leader()) {
      sts4(smem, uint32_t(ns), uint32_t(ns >> 32), 0u, smid());
      sts4(smem + 16, cta, (threadIdx.x / 32) | (uint32_t(role) << 16), 0u, buf.capacity);
      sts4(smem + 32, uint32_t(clk), uint32_t(clk >> 32), 0u /* the count */, 0u);
      sts4(smem + 48, 0u, 0u, uint32_t(addr), uint32_t(addr >> 32));
    }
  }

  __device__ __forceinline__ uint32_t now() const { return smem_ == 0 ? 0u : uint32_t(clock_cycles()); }

  template <class TagT>
  __device__ __forceinline__ uint32_t record(TagT tag, uint32_t start, uint32_t tile = kNoTile,
                                             uint32_t kblock = kNoKBlock) {
    if (smem_ == 0) return 0;
    const uint32_t end = now();
    record_span(tag, start, end, tile, kblock);
    return end;
  }

  // The count read by every lane (one broadcast load), then the record and the new count stored by
  // lane 0 under a predicate. No "memory" clobber, so the compiler may schedule the kernel's own
  // code around it; volatile asm keeps the three in order. Entering a half of the
  // ring, first let the copy that last read it finish reading (it was issued at least half a ring
  // ago: no wait in practice; the copy of the other half cannot have been issued yet, as that half
  // only filled just now).
  template <class TagT>
  __device__ __forceinline__ void record_span(TagT tag, uint32_t start, uint32_t end, uint32_t tile = kNoTile,
                                              uint32_t kblock = kNoKBlock) {
    if (smem_ == 0) return;
    uint32_t n;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(n) : "r"(smem_ + kCountAt));
    if (n % kHalf == 0 && leader()) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    const uint32_t a = smem_ + kHeaderWords * 4 + (n % kRing) * kRecordWords * 4;
    asm volatile(
        "{\n .reg .pred p;\n setp.eq.u32 p, %5, 0;\n @p st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n"
        " @p st.shared.u32 [%6], %7;\n}" ::"r"(a),
        "r"(start), "r"(end), "r"(tile), "r"(uint32_t(tag) | (kblock << 8)), "r"(threadIdx.x % 32),
        "r"(smem_ + kCountAt), "r"(n + 1));
  }

  // Copy every full half of the ring not yet copied to the region.
  __device__ __forceinline__ void poll() const {
    if (smem_ == 0 || !leader()) return;
    uint32_t flushed = lds(smem_ + kFlushedAt);
    const uint32_t n = count();
#ifdef GEMMTRACE_DEBUG
    if (n - flushed > kRing) __trap();  // records were overwritten before being copied: poll more often
#endif
    // At most two halves are full (the contract above); a rolled loop keeps every poll site's code
    // short (unrolled, it took some 150 instructions a site, laid out inside the hot loops).
#pragma unroll 1
    while (n - flushed >= kHalf) {
      copy(flushed, kHalf);
      flushed += kHalf;
    }
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(smem_ + kFlushedAt), "r"(flushed) : "memory");
  }

  // Lane 0: records [first, first + n), within one half of the ring, to the region; those past its
  // capacity are not copied (the header's count still includes them: the host reports the drop).
  __device__ __forceinline__ void copy(uint32_t first, uint32_t n) const {
    const uint32_t capacity = lds(smem_ + kCapacityAt);
    if (first >= capacity) return;
    const uint32_t bytes = min(n, capacity - first) * kRecordWords * 4;
    const uint64_t dst = region() + (kHeaderWords + uint64_t(first) * kRecordWords) * 4;
    const uint32_t src = smem_ + kHeaderWords * 4 + (first % kRing) * kRecordWords * 4;
    // The ring was written through the generic proxy; the bulk copy reads it through the async one.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }

  // The records not yet copied, then the header (end times, count, magic), stored by lane 0 with
  // plain global stores: a region whose header never arrives is one whose warp never finished.
  // The lane then waits only for the copies poll() issued earlier to have read shared memory, which
  // must outlive them; all the writes complete with the grid, before the host reads the buffer.
  // Bulk copies here too (the rest, then the header) went through the TMA engine that takes the
  // kernel's last stores of C; plain stores were 0.1 us faster a launch on the H100 where the
  // profiled kernel is short (bench/NOTES.md).
  __device__ __forceinline__ void finish() {
    if (smem_ == 0 || !leader()) return;
    const uint32_t flushed = lds(smem_ + kFlushedAt), n = count();
#ifdef GEMMTRACE_DEBUG
    if (n - flushed > kRing) __trap();  // records were overwritten before being copied: poll more often
#endif
    const uint32_t capacity = lds(smem_ + kCapacityAt);
    uint32_t* const dst = reinterpret_cast<uint32_t*>(region());
    const uint32_t last = min(n, capacity);
    // At most kRing records, four at a time: their shared loads issued together, then their stores.
#pragma unroll 1
    for (uint32_t first = flushed; first < last; first += 4) {
      uint4 r[4];
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j)
        if (first + j < last) r[j] = lds4(smem_ + (kHeaderWords + ((first + j) % kRing) * kRecordWords) * 4);
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j)
        if (first + j < last) stg4(dst + kHeaderWords + (first + j) * kRecordWords, r[j]);
    }
    const uint64_t clk = clock_cycles(), ns = globaltimer_ns();
    uint4 h0 = lds4(smem_), h1 = lds4(smem_ + 16), h2 = lds4(smem_ + 32);
    h0.z = kMagic, h1.z = n, h2.z = uint32_t(clk), h2.w = uint32_t(clk >> 32);
    stg4(dst, h0);
    stg4(dst + 4, h1);
    stg4(dst + 8, h2);
    stg4(dst + 12, make_uint4(uint32_t(ns), uint32_t(ns >> 32), kRawClocks, 0u));
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
};

}  // namespace gemmtrace
