// cluster_placement: which SMs share a GPC, and where a launch of clusters of two puts each cluster
// (sm_90a).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o cluster_placement bench/cluster_placement.cu && ./cluster_placement
//
// Every CTA of a cluster runs in one GPC, so SMs that ever hold CTAs of one cluster share a GPC.
// The program launches clusters of 16, 12, 9, 8, 6, 4 and 2 CTAs (one CTA an SM, all resident at once,
// CTAs spinning 200 us so none finishes before the last starts), records each CTA's SM, and joins
// the SMs of every cluster into groups. SMs that no cluster reached are left in groups of their own.
// Then it launches 128 CTAs in clusters of two with 225 KB of shared memory each (one CTA an SM,
// as gemmtrace's 64x64/c2 tile launches them at 512x1024x8192) three times and prints, per cluster,
// its SMs and group, and whether the placement repeated. The last line, "cluster_group: g0 g1 ...", is what
// bench/gpc_tile_orders.py reads. (bench/NOTES.md: "Where cuBLAS's 64x64 kernel saves its L2 reads".)
#include "sm90_bench.cuh"

#include <numeric>

namespace {

__global__ void where(int* sm_of_cta, uint64_t spin_ns) {
  extern __shared__ uint8_t smem[];
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (threadIdx.x == 0) {
    sm_of_cta[blockIdx.x] = int(smid);
    smem[0] = 1;
  }
  const uint64_t t0 = sm90_bench::globaltimer();
  while (sm90_bench::globaltimer() - t0 < spin_ns) {
  }
}

// One launch of `ctas` CTAs (0: as many clusters as fit at once) in clusters of `cluster`, with
// `smem` bytes of dynamic shared memory each; returns each CTA's SM (checked to be below `sms`).
std::vector<int> place(int cluster, int smem, int ctas, int sms) {
  CK(cudaFuncSetAttribute(where, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(where, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(cluster * 256), cfg.blockDim = dim3(128), cfg.dynamicSmemBytes = smem, cfg.attrs = attr, cfg.numAttrs = 1;
  if (ctas == 0) {
    int fits = 0;
    CK(cudaOccupancyMaxActiveClusters(&fits, where, &cfg));
    ctas = fits * cluster;
  }
  cfg.gridDim = dim3(ctas);
  int* d;
  CK(cudaMalloc(&d, ctas * sizeof(int)));
  CK(cudaLaunchKernelEx(&cfg, where, d, uint64_t(200000)));
  CK(cudaDeviceSynchronize());
  std::vector<int> sm(ctas);
  CK(cudaMemcpy(sm.data(), d, ctas * sizeof(int), cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  for (int s : sm)
    if (s < 0 || s >= sms) {
      std::printf("a CTA reported SM %d, outside 0..%d: this GPU numbers its SMs in a way this program does not handle.\n", s,
                  sms - 1);
      std::exit(1);
    }
  return sm;
}

int find(std::vector<int>& parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

}  // namespace

int main() {
  const cudaDeviceProp prop = sm90_bench::require_sm90("cluster_placement");
  const int sms = prop.multiProcessorCount, big = 200 * 1024;
  std::vector<int> parent(sms);
  std::iota(parent.begin(), parent.end(), 0);
  for (int cluster : {16, 12, 9, 8, 6, 4, 2}) {
    const std::vector<int> sm = place(cluster, big, 0, sms);
    for (size_t c = 0; c + cluster <= sm.size(); c += cluster)
      for (int r = 1; r < cluster; ++r) parent[find(parent, sm[c + r])] = find(parent, sm[c]);
  }
  // Groups numbered by their lowest SM.
  std::vector<int> group(sms, -1), root_group(sms, -1);
  int groups = 0;
  for (int s = 0; s < sms; ++s) {
    const int r = find(parent, s);
    if (root_group[r] < 0) root_group[r] = groups++;
    group[s] = root_group[r];
  }
  std::printf("%s, %d SMs: %d groups of SMs that shared a cluster (GPCs; an SM no cluster reached stands alone)\n", prop.name,
              sms, groups);
  for (int g = 0; g < groups; ++g) {
    std::printf("group %2d:", g);
    for (int s = 0; s < sms; ++s)
      if (group[s] == g) std::printf(" %d", s);
    std::printf("\n");
  }
  // The 64x64/c2 launch: 128 CTAs in clusters of two, 225 KB each (one CTA an SM).
  const std::vector<int> first = place(2, 225 * 1024, 128, sms);
  bool same = true;
  for (int rep = 0; rep < 2; ++rep) same = same && place(2, 225 * 1024, 128, sms) == first;
  std::printf("128 CTAs in clusters of two: the same SMs in 3 launches: %s\n", same ? "yes" : "no");
  std::printf("cluster: SMs (group)\n");
  for (int c = 0; c < 64; ++c) std::printf("%2d: %3d %3d (%d)%s", c, first[2 * c], first[2 * c + 1], group[first[2 * c]], c % 8 == 7 ? "\n" : "   ");
  std::printf("cluster_group:");
  for (int c = 0; c < 64; ++c) std::printf(" %d", group[first[2 * c]]);
  std::printf("\n");
  return 0;
}
