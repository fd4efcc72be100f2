// gemmtrace host helpers for C++ programs (no Python in the launch path): size and allocate the
// profiler buffer from the launch, then save it as the raw format `gemmtrace import` reads
// (docs/own-kernel.md): RAW.bin, the buffer's uint32 words as the device wrote them, and RAW.json,
// its layout and the launch's metadata.
//
//   gemmtrace::HostCapture cap;
//   cap.allocate(grid_ctas, /*regions_per_cta=*/3, /*capacity=*/4096);   // cudaMalloc + zero
//   my_kernel<<<grid, block, smem>>>(..., cap.buffer());
//   cap.save("runs/my_gemm", "my_gemm", M, N, K, "my_tags.h");            // after the launch
//   cap.release();
//   $ gemmtrace import runs/my_gemm.json -o runs/my_gemm                  // a run folder
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "profiler.cuh"

namespace gemmtrace {

constexpr int kRawFormatVersion = 1;

// Bytes of a buffer with `ctas * regions_per_cta` regions of `capacity` records each.
inline size_t profile_buffer_bytes(uint64_t ctas, uint32_t regions_per_cta, uint32_t capacity) {
  return size_t(ctas) * regions_per_cta * (kHeaderWords + size_t(capacity) * kRecordWords) * sizeof(uint32_t);
}

class HostCapture {
 public:
  // Allocate and zero the buffer (zero matters: a region whose header never arrives is one whose
  // warp never finished). Returns the CUDA error, if any.
  cudaError_t allocate(uint64_t ctas, uint32_t regions_per_cta, uint32_t capacity, cudaStream_t stream = nullptr) {
    release();
    ctas_ = ctas, regions_per_cta_ = regions_per_cta, capacity_ = capacity;
    bytes_ = profile_buffer_bytes(ctas, regions_per_cta, capacity);
    cudaError_t e = cudaMalloc(&data_, bytes_);
    if (e != cudaSuccess) return data_ = nullptr, e;
    return cudaMemsetAsync(data_, 0, bytes_, stream);
  }

  ProfileBuffer buffer() const { return ProfileBuffer{static_cast<uint32_t*>(data_), capacity_, regions_per_cta_}; }
  size_t bytes() const { return bytes_; }

  // Wait for the device, copy the buffer back, write PREFIX.bin and PREFIX.json. `tags_header`
  // (may be null: gemmtrace's own tags) is stored as given; a relative path is read relative to
  // the JSON file. Returns 0, or -1 with a message on stderr.
  int save(const char* prefix, const char* name, int64_t m, int64_t n, int64_t k, const char* tags_header = nullptr) const {
    if (!data_) return fail("gemmtrace: save() before allocate()");
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return fail(cudaGetErrorString(e));
    std::vector<uint32_t> host(bytes_ / sizeof(uint32_t));
    e = cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return fail(cudaGetErrorString(e));
    int dev = 0;
    cudaDeviceProp prop{};
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    const std::string base(prefix);
    std::FILE* f = std::fopen((base + ".bin").c_str(), "wb");
    if (!f || std::fwrite(host.data(), sizeof(uint32_t), host.size(), f) != host.size()) {
      if (f) std::fclose(f);
      return fail("gemmtrace: cannot write the .bin file");
    }
    std::fclose(f);
    f = std::fopen((base + ".json").c_str(), "w");
    if (!f) return fail("gemmtrace: cannot write the .json file");
    const std::string bin = base.substr(base.find_last_of('/') + 1) + ".bin";
    std::fprintf(f,
                 "{\n  \"format\": \"gemmtrace-raw\",\n  \"version\": %d,\n  \"buffer\": \"%s\",\n"
                 "  \"num_regions\": %llu,\n  \"capacity\": %u,\n  \"regions_per_cta\": %u,\n  \"grid_ctas\": %llu,\n"
                 "  \"name\": \"%s\",\n  \"shape\": [%lld, %lld, %lld],\n  \"tags_header\": %s%s%s,\n"
                 "  \"device\": {\"name\": \"%s\", \"sm_count\": %d, \"compute_capability\": \"%d.%d\", \"l2_bytes\": %d}\n}\n",
                 kRawFormatVersion, bin.c_str(), (unsigned long long)(ctas_ * regions_per_cta_), capacity_,
                 regions_per_cta_, (unsigned long long)ctas_, name, (long long)m, (long long)n, (long long)k,
                 tags_header ? "\"" : "", tags_header ? tags_header : "null", tags_header ? "\"" : "", prop.name,
                 prop.multiProcessorCount, prop.major, prop.minor, prop.l2CacheSize);
    std::fclose(f);
    return 0;
  }

  void release() {
    if (data_) cudaFree(data_);
    data_ = nullptr;
  }
  ~HostCapture() { release(); }

 private:
  static int fail(const char* msg) {
    std::fprintf(stderr, "%s\n", msg);
    return -1;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  uint64_t ctas_ = 0;
  uint32_t regions_per_cta_ = 0, capacity_ = 0;
};

}  // namespace gemmtrace
