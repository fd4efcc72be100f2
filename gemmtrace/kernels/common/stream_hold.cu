// Support kernels for gemmtrace.timing (not a GEMM kernel, not in the registry).
//
// gt_hold launches one thread that spins until the host writes 1 to a flag in pinned memory, so the
// work the host enqueues behind it on the same stream (event, launch, event, ...) starts only when
// the host has finished enqueueing: the events then bracket GPU work only, not the host's launch
// path. If the flag is not set within the timeout the kernel gives up and writes 1 to `timed_out`,
// so a host that stalls (or synchronizes while the stream is held) can never hang the GPU.
//
// gt_stamp reads %globaltimer and clock64 on SM 0; two stamps around a round of launches give the
// SM clock over that round (elapsed cycles / elapsed ns).
//
// Built for compute_80 (cubin and PTX, so newer GPUs JIT it) and sm_90a by gemmtrace.build.build_support.
#include <cuda_runtime.h>
#include <cstdint>

namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_kernel(const volatile int32_t* flag, volatile int32_t* timed_out, uint64_t timeout_ns) {
  const uint64_t start = global_ns();
  while (*flag == 0) {
    if (global_ns() - start > timeout_ns) {
      *timed_out = 1;
      __threadfence_system();
      return;
    }
    __nanosleep(64);  // fewer reads over the bus while waiting; far below the events' resolution
  }
}

__global__ void stamp_kernel(uint64_t* out) {
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (smid == 0) {  // one SM's counter: clock64 is per SM, so both stamps must come from the same one
    out[0] = global_ns();
    out[1] = uint64_t(clock64());
  }
}

}  // namespace

extern "C" {

// Launch the hold on `stream`; `flag` and `timed_out` are device addresses of pinned host memory.
int gt_hold(cudaStream_t stream, const int32_t* flag, int32_t* timed_out, uint64_t timeout_ns) {
  hold_kernel<<<1, 1, 0, stream>>>(flag, timed_out, timeout_ns);
  return int(cudaGetLastError());
}

// Launch the stamp on `stream` with `blocks` one-thread blocks (enough that one lands on SM 0).
int gt_stamp(cudaStream_t stream, uint64_t* out, int blocks) {
  stamp_kernel<<<blocks, 1, 0, stream>>>(out);
  return int(cudaGetLastError());
}

// The device address of pinned host memory (the same address under UVA; asked, not assumed).
int gt_device_pointer(void* host, void** device) { return int(cudaHostGetDevicePointer(device, host, 0)); }

// The current device's maximum SM clock in kHz.
int gt_max_sm_clock_khz(int* khz) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return int(e);
  return int(cudaDeviceGetAttribute(khz, cudaDevAttrClockRate, dev));
}

const char* gt_error_string(int code) { return cudaGetErrorString(cudaError_t(code)); }

}  // extern "C"
