// What bench's CUDA microbenchmarks (first_loads.cu, tma_intake.cu, cluster_placement.cu) share:
// error checks, the sm_90 check, the driver's tensor-map encoder, 2D bf16 operand maps in 128-byte
// swizzle, the median, and the global timer. Included by relative path, so each still builds with
// one nvcc command.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                    \
  do {                                                           \
    cudaError_t e = (x);                                         \
    if (e != cudaSuccess) {                                      \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                              \
    }                                                            \
  } while (0)

namespace sm90_bench {

__device__ __forceinline__ uint64_t globaltimer() { uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// Device 0, or one sentence and exit when it is not an sm_90 GPU (`name`: the program's).
inline cudaDeviceProp require_sm90(const char* name) {
  CK(cudaSetDevice(0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) {
    std::printf("%s needs an sm_90 GPU (H100, H200); this is %s (sm_%d%d).\n", name, prop.name, prop.major, prop.minor);
    std::exit(1);
  }
  return prop;
}

// cuTensorMapEncodeTiled, from the driver through the runtime (no -lcuda).
inline EncodeTiled tensor_map_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  return reinterpret_cast<EncodeTiled>(fn);
}

// A (rows, cols) row-major bf16 matrix as a 2D map {cols, rows} with a box one 128-byte swizzle atom
// wide ({64, box_rows}): an operand tile as wgmma reads it.
inline CUtensorMap rows_map(EncodeTiled encode, void* p, int rows, int cols, int box_rows,
                            CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)}, strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)}, elem[2] = {1, 1};
  if (encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::printf("encoding a tensor map failed\n");
    std::exit(1);
  }
  return m;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace sm90_bench
