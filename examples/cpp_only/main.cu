// A C++ program that traces a GEMM with no Python in the launch path: it runs the warp-specialized
// Hopper GEMM of examples/ctypes_library (ws_gemm.cu, included below, with its tag header), checks
// it against a plain fp32 GPU kernel, times the plain and the profiled build, and saves one
// profiled launch with gemmtrace::HostCapture for `gemmtrace import`.
//
//   ws_gemm_cpp [M N K] [PREFIX]      defaults: 4096 4096 4096 runs/cpp_only/raw/ws_gemm
//
// writes PREFIX.bin (the profiler buffer), PREFIX.json (its layout, the launch, the timings) and
// PREFIX.tags.h (the kernel's vocabulary, which PREFIX.json names), then:
//
//   gemmtrace import PREFIX.json -o RUN && gemmtrace analyze RUN
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gemmtrace/capture_host.h"
#include "ws_gemm.cu"  // the kernel, ws_gemm_plan and ws_gemm_launch (-I examples/ctypes_library)

namespace {

constexpr double kTolerance = 1e-2;  // relative Frobenius error against the fp32 reference
constexpr int kTimedRounds = 20;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::exit(1);
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + " failed: " + cudaGetErrorString(e) + ".");
}

// Random normal bf16 values from a seeded host generator (splitmix64 + Box-Muller): no curand.
std::vector<__nv_bfloat16> random_normal(size_t count, uint64_t seed) {
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  };
  std::vector<__nv_bfloat16> out(count);
  for (size_t i = 0; i < count; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(1.0 - next())), phi = 6.283185307179586 * next();
    out[i] = __float2bfloat16(float(r * std::cos(phi)));
    if (i + 1 < count) out[i + 1] = __float2bfloat16(float(r * std::sin(phi)));
  }
  return out;
}

// The reference: C = A·Bᵀ in fp32 from the same bf16 inputs, 16x16 tiles through shared memory.
__global__ void reference_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  __shared__ float a[16][17], b[16][17];
  const int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float sum = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    const int ar = blockIdx.y * 16 + threadIdx.y, br = blockIdx.x * 16 + threadIdx.y, kc = k0 + threadIdx.x;
    a[threadIdx.y][threadIdx.x] = ar < M && kc < K ? __bfloat162float(A[size_t(ar) * K + kc]) : 0.f;
    b[threadIdx.y][threadIdx.x] = br < N && kc < K ? __bfloat162float(B[size_t(br) * K + kc]) : 0.f;
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk) sum += a[threadIdx.y][kk] * b[threadIdx.x][kk];
    __syncthreads();
  }
  if (row < M && col < N) C[size_t(row) * N + col] = sum;
}

struct Problem {
  int64_t m, n, k;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  float* ref = nullptr;

  Problem(int64_t m_, int64_t n_, int64_t k_, uint64_t seed) : m(m_), n(n_), k(k_) {
    check_cuda(cudaMalloc(&a, size_t(m) * k * 2), "allocating A");
    check_cuda(cudaMalloc(&b, size_t(n) * k * 2), "allocating B");
    check_cuda(cudaMalloc(&c, size_t(m) * n * 2), "allocating C");
    check_cuda(cudaMalloc(&ref, size_t(m) * n * 4), "allocating the reference");
    const auto ha = random_normal(size_t(m) * k, seed), hb = random_normal(size_t(n) * k, seed + 1);
    check_cuda(cudaMemcpy(a, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice), "copying A");
    check_cuda(cudaMemcpy(b, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice), "copying B");
    const dim3 grid(unsigned((n + 15) / 16), unsigned((m + 15) / 16));
    reference_gemm<<<grid, dim3(16, 16)>>>(a, b, ref, int(m), int(n), int(k));
    check_cuda(cudaGetLastError(), "launching the reference");
  }
  ~Problem() {
    cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(ref);
  }

  void launch(const gemmtrace::ProfileBuffer* prof, cudaStream_t stream = nullptr) const {
    char err[256];
    if (ws_gemm_launch(a, b, c, m, n, k, stream, prof ? prof->data : nullptr, prof ? prof->capacity : 0,
                       prof ? prof->regions_per_cta : 0, err, sizeof err))
      die(err);
  }

  // C starts as NaN (all bits set), so an element the kernel never writes fails the check.
  // Returns the relative Frobenius error; prints it with the largest absolute error.
  double check(const gemmtrace::ProfileBuffer* prof, const char* build) const {
    check_cuda(cudaMemset(c, 0xFF, size_t(m) * n * 2), "poisoning C");
    launch(prof);
    check_cuda(cudaDeviceSynchronize(), "running ws_gemm");
    std::vector<__nv_bfloat16> hc(size_t(m) * n);
    std::vector<float> hr(size_t(m) * n);
    check_cuda(cudaMemcpy(hc.data(), c, hc.size() * 2, cudaMemcpyDeviceToHost), "copying C back");
    check_cuda(cudaMemcpy(hr.data(), ref, hr.size() * 4, cudaMemcpyDeviceToHost), "copying the reference back");
    double diff2 = 0, ref2 = 0, max_abs = 0;
    for (size_t i = 0; i < hc.size(); ++i) {
      const double d = double(__bfloat162float(hc[i])) - hr[i];
      diff2 += d * d, ref2 += double(hr[i]) * hr[i];
      max_abs = std::isnan(d) ? NAN : std::max(max_abs, std::fabs(d));
      if (std::isnan(d)) break;
    }
    const double rel = std::isnan(max_abs) ? NAN : std::sqrt(diff2 / std::max(ref2, 1e-30));
    std::printf("check %lldx%lldx%lld %-8s relative error %.2e, max abs error %.3g\n", (long long)m, (long long)n,
                (long long)k, build, rel, max_abs);
    if (!(rel < kTolerance)) {  // also catches NaN
      char msg[160];
      std::snprintf(msg, sizeof msg, "the %s build is wrong at %lldx%lldx%lld: relative error %.3g (tolerance %g).",
                    build, (long long)m, (long long)n, (long long)k, rel, kTolerance);
      die(msg);
    }
    return rel;
  }
};

int64_t plan_or_die(int64_t m, int64_t n, int64_t k, int32_t* regions, int32_t* capacity) {
  int64_t ctas;
  char err[256];
  if (ws_gemm_plan(m, n, k, &ctas, regions, capacity, err, sizeof err)) die(err);
  return ctas;
}

// Check the plain and the profiled build on one shape (the profiled one with a buffer of its own).
void check_shape(int64_t m, int64_t n, int64_t k, uint64_t seed) {
  int32_t regions, capacity;
  const int64_t ctas = plan_or_die(m, n, k, &regions, &capacity);
  Problem p(m, n, k, seed);
  p.check(nullptr, "plain");
  gemmtrace::HostCapture cap;
  check_cuda(cap.allocate(uint64_t(ctas), uint32_t(regions), uint32_t(capacity)), "allocating the profiler buffer");
  const gemmtrace::ProfileBuffer buf = cap.buffer();
  p.check(&buf, "profiled");
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The kernel's vocabulary as a header of the tags.h form, generated from the same X-macro lists the
// kernel was compiled with, so the capture carries the names its ids mean.
#define WS_GEMM_ROLE_LINE(name, id, str) "  X(" #name ", " #id ", \"" str "\") \\\n"
#define WS_GEMM_TAG_LINE(name, id, str, group) "  X(" #name ", " #id ", \"" str "\", \"" group "\") \\\n"
constexpr const char* kTagsHeader =
    "// The vocabulary of ws_gemm (examples/ctypes_library/ws_gemm_tags.h), written by ws_gemm_cpp.\n"
    "#pragma once\n\n#define WS_GEMM_ROLES(X) \\\n" WS_GEMM_ROLES(WS_GEMM_ROLE_LINE) "\n"
    "#define WS_GEMM_TAGS(X) \\\n" WS_GEMM_TAGS(WS_GEMM_TAG_LINE) "\n";

// HostCapture::save writes the raw JSON; the timings go in as one more key (the raw format reads
// `timings` with the keys of a run's meta.json).
void add_timings(const std::string& json_path, double plain_ms, double profiled_ms, double flops, int rounds) {
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  std::string json = text.str();
  const size_t end = json.find_last_of('}');
  if (end == std::string::npos) die("the raw capture's JSON is not what HostCapture writes.");
  char timings[512];
  std::snprintf(timings, sizeof timings,
                ",\n  \"timings\": {\"kernel_ms\": %.6f, \"profiled_ms\": %.6f, \"profiler_overhead\": %.6f, "
                "\"tflops\": %.3f, \"method\": \"CUDA events around each launch, %d launches of each build "
                "interleaved, median\"}\n",
                plain_ms, profiled_ms, profiled_ms / plain_ms - 1.0, flops / (plain_ms * 1e-3) / 1e12, rounds);
  const size_t last = json.find_last_not_of(" \n", end - 1);  // the end of the last value before the final brace
  json = json.substr(0, last + 1) + timings + json.substr(end);
  std::ofstream(json_path) << json;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 1 && argc != 2 && argc != 4 && argc != 5)
    die("usage: ws_gemm_cpp [M N K] [PREFIX] (default 4096 4096 4096 runs/cpp_only/raw/ws_gemm).");
  int64_t m = 4096, n = 4096, k = 4096;
  if (argc >= 4) {
    char* end[3];
    m = std::strtoll(argv[1], &end[0], 10), n = std::strtoll(argv[2], &end[1], 10), k = std::strtoll(argv[3], &end[2], 10);
    if (*end[0] || *end[1] || *end[2]) die("M, N and K must be integers.");
  }
  const std::string prefix = argc == 2 ? argv[1] : argc == 5 ? argv[4] : "runs/cpp_only/raw/ws_gemm";
  int32_t regions, capacity;
  const int64_t ctas = plan_or_die(m, n, k, &regions, &capacity);  // the shape is valid before any GPU work

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) die("no CUDA GPU is visible.");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "reading the device's properties");
  if (prop.major != 9 || prop.minor != 0)
    die(std::string("the kernel is built for sm_90a (Hopper: TMA and wgmma); ") + prop.name + " is sm_" +
        std::to_string(prop.major) + std::to_string(prop.minor) + ".");

  // 1. Correct on the shape and on shapes that are not multiples of the 128x128 tile.
  check_shape(m, n, k, 1);
  check_shape(259, 97, 1000, 2);
  check_shape(131, 1001, 40, 3);

  // 2. Time the plain and the profiled build: events around each launch, every launch enqueued
  // before the first is waited for, so the events bracket GPU work, not the host's launch path.
  Problem p(m, n, k, 4);
  gemmtrace::HostCapture cap;
  check_cuda(cap.allocate(uint64_t(ctas), uint32_t(regions), uint32_t(capacity)), "allocating the profiler buffer");
  const gemmtrace::ProfileBuffer buf = cap.buffer();
  for (int i = 0; i < 3; ++i) p.launch(nullptr), p.launch(&buf);  // warm-up
  std::vector<cudaEvent_t> events(4 * kTimedRounds);
  for (auto& e : events) check_cuda(cudaEventCreate(&e), "creating an event");
  for (int r = 0; r < kTimedRounds; ++r)
    for (int v = 0; v < 2; ++v) {
      const bool profiled = (r + v) % 2 == 1;  // alternate which build goes first
      cudaEvent_t* e = &events[4 * r + 2 * profiled];
      check_cuda(cudaEventRecord(e[0]), "recording an event");
      p.launch(profiled ? &buf : nullptr);
      check_cuda(cudaEventRecord(e[1]), "recording an event");
    }
  check_cuda(cudaDeviceSynchronize(), "running the timed launches");
  std::vector<float> plain_ms(kTimedRounds), profiled_ms(kTimedRounds);
  for (int r = 0; r < kTimedRounds; ++r) {
    cudaEventElapsedTime(&plain_ms[r], events[4 * r], events[4 * r + 1]);
    cudaEventElapsedTime(&profiled_ms[r], events[4 * r + 2], events[4 * r + 3]);
  }
  for (auto& e : events) cudaEventDestroy(e);
  const double plain = median(plain_ms), profiled = median(profiled_ms);
  std::printf("plain %.4f ms (%.1f TFLOP/s), profiled %.4f ms: profiler overhead %+.2f %%\n", plain,
              2.0 * m * n * k / (plain * 1e9), profiled, 100.0 * (profiled / plain - 1.0));

  // 3. Capture one profiled launch into a clean buffer and save it.
  check_cuda(cap.allocate(uint64_t(ctas), uint32_t(regions), uint32_t(capacity)), "clearing the profiler buffer");
  const gemmtrace::ProfileBuffer traced = cap.buffer();
  p.launch(&traced);
  const std::filesystem::path dir = std::filesystem::path(prefix).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  const std::string tags_name = std::filesystem::path(prefix).filename().string() + ".tags.h";
  std::ofstream(prefix + ".tags.h") << kTagsHeader;
  if (cap.save(prefix.c_str(), "ws_gemm", m, n, k, tags_name.c_str()) != 0) die("saving the capture failed.");
  add_timings(prefix + ".json", plain, profiled, 2.0 * m * n * k, kTimedRounds);
  std::printf("saved %s.json, %s.bin and %s.tags.h\nnext: gemmtrace import %s.json -o RUN && gemmtrace analyze RUN\n",
              prefix.c_str(), prefix.c_str(), prefix.c_str(), prefix.c_str());
  return 0;
}
