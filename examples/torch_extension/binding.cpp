// The torch binding of wsmma_gemm.cu: checks the tensors and launches on torch's current stream.
// Compiled by the host compiler (no CUDA code here), so the kernel's translation unit stays free of
// torch headers and compiles on its own (tests/test_examples.py does).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <stdexcept>
#include <string>

#include "wsmma_gemm.h"

namespace {

// std::invalid_argument reaches Python as ValueError carrying this message alone.
[[noreturn]] void bad(const std::string& msg) { throw std::invalid_argument(msg); }

void check_operand(const at::Tensor& t, const char* name) {
  if (!t.is_cuda()) bad(std::string(name) + " must be a CUDA tensor.");
  if (t.scalar_type() != at::kBFloat16) bad(std::string(name) + " must be bfloat16.");
  if (t.dim() != 2) bad(std::string(name) + " must be a matrix.");
  if (!t.is_contiguous()) bad(std::string(name) + " must be contiguous (row-major).");
}

// (CTAs, regions per CTA, records per region): what gemmtrace.capture needs to size the buffer.
std::tuple<int64_t, int64_t, int64_t> plan(int64_t m, int64_t n, int64_t k) {
  wsmma::Plan p;
  char err[256];
  if (wsmma::plan(m, n, k, &p, err, sizeof err)) bad(err);
  return {p.ctas, p.regions_per_cta, p.capacity};
}

// C = A·Bᵀ. prof_data == 0 launches the plain build; otherwise the profiled build records into the
// buffer whose fields gemmtrace's Capture.fields() gives.
void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t prof_data, int64_t prof_capacity,
          int64_t prof_regions_per_cta) {
  check_operand(a, "A");
  check_operand(b, "B");
  check_operand(c, "C");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (b.size(1) != k) bad("A is (M, K) and B is (N, K): their second dimensions differ.");
  if (c.size(0) != m || c.size(1) != n) bad("C must be (M, N).");
  if (b.device() != a.device() || c.device() != a.device()) bad("A, B and C must be on the same GPU.");
  const c10::cuda::CUDAGuard guard(a.device());
  char err[256];
  if (wsmma::launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, prof_data != 0,
                    reinterpret_cast<uint32_t*>(prof_data), uint32_t(prof_capacity), uint32_t(prof_regions_per_cta),
                    c10::cuda::getCurrentCUDAStream().stream(), err, sizeof err))
    bad(err);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "A warp-specialized mma.sync GEMM (C = A·Bᵀ, bf16) instrumented with gemmtrace.";
  m.def("plan", &plan, "(ctas, regions_per_cta, capacity) of a launch", py::arg("m"), py::arg("n"), py::arg("k"));
  m.def("gemm", &gemm, "C = A·Bᵀ; prof_data != 0 runs the profiled build", py::arg("a"), py::arg("b"), py::arg("c"),
        py::arg("prof_data") = 0, py::arg("prof_capacity") = 0, py::arg("prof_regions_per_cta") = 0);
}
