// Memory-pattern probes for the commit kernel's state traffic (benchmarks/gpu_membench.py): every state tile of
// the commit is read and written back in place, nothing is folded. Why: at 4 steps (397B at TP 4) the commit is
// bound by its state traffic (755 MB in 220 us, 84% of the copy ceiling; notes/perf.md, session 7's skeleton),
// and these kernels separate what the access pattern costs from what the kernel's structure costs.
//
// Shapes: state [layers, slots, tiles_per_slot, TILE] fp32 (a layer-slot's 1 MB at 397B = 128 tiles of 8 KB),
// slots [batch] int32. A team item is (layer, row, TEAM consecutive tiles); block p takes items p, p + P, ...;
// warp w of a block moves tile TEAM c + w of item c. A lane's 16 float4 of a tile sit where gdn_fold.cu's
// registers put them (column 4 (lane / 8) + q, k 4 (8 m + lane % 8)), or `linear`ly; `contiguous` changes which
// items a block takes (Walk); a grid of one block per item is not persistent. Values are multiplied by `scale` (1.0)
// so that no load-store pair is a no-op the compiler may drop.

#define TEAM 4
#define TILE 2048  // floats: 16 columns x 128 k

struct Probe {
  float* state;
  const int* slots;
  int layers, batch, slots_in_pool, tiles_per_slot;
  float scale;
  int contiguous;  // 0: block p takes items p, p + P, ... (gdn_fold.cu); 1: a contiguous range of them
  int linear;      // 0: a lane's float4 where gdn_fold.cu's registers are; 1: float4 j of lane l at 32 j + l
};

// the items block blockIdx.x takes: i, i + step, ... below end
struct Walk {
  int i, end, step;
};

__device__ __forceinline__ Walk walk_of(const Probe& a) {
  const int total = a.layers * a.batch * (a.tiles_per_slot / TEAM), P = gridDim.x, p = blockIdx.x;
  if (!a.contiguous) return {p, total, P};
  const int per = (total + P - 1) / P;
  return {p * per, min(total, (p + 1) * per), 1};
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ float* tile_at(const Probe& a, int item, int warp) {
  const int per_slot = a.tiles_per_slot / TEAM;
  const int chunk = item % per_slot, rest = item / per_slot;
  const int row = rest % a.batch, layer = rest / a.batch;
  const long long slot = __ldg(a.slots + row);
  return a.state + (((long long)layer * a.slots_in_pool + slot) * a.tiles_per_slot + chunk * TEAM + warp) * TILE;
}

__device__ __forceinline__ int lane_offset(const Probe& a, int q, int m) {
  const int lane = threadIdx.x & 31;
  return a.linear ? 4 * (32 * (4 * q + m) + lane) : (4 * (lane >> 3) + q) * 128 + 4 * (8 * m + (lane & 7));
}

__device__ __forceinline__ void store_regs(const Probe& a, float* dst, float4 (&h)[4][4], float s) {
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      float4 w = h[q][m];
      *reinterpret_cast<float4*>(dst + lane_offset(a, q, m)) = make_float4(w.x * s, w.y * s, w.z * s, w.w * s);
    }
}

// ---- mbarrier and bulk copies (one lane issues, the warp waits), as gdn_fold.cu
__device__ __forceinline__ void mbar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ bool mbar_done(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n}"
               : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  while (!__all_sync(0xffffffffu, mbar_done(bar, parity))) {
  }
}
__device__ __forceinline__ void load_tile(unsigned dst, const float* src, unsigned bar) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(TILE * 4) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(TILE * 4), "r"(bar) : "memory");
}
// every lane: its shared-memory writes are made visible to the bulk copies (before the warp's __syncwarp)
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void store_tile_bulk(float* dst, unsigned src) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst), "r"(src), "r"(TILE * 4) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void bulk_read_done() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_all_done() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void lds_tile(const Probe& a, float4 (&h)[4][4], const float* tile) {
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int m = 0; m < 4; ++m) h[q][m] = *reinterpret_cast<const float4*>(tile + lane_offset(a, q, m));
}

// ldst: each tile loaded into registers (16 loads in flight a lane) and stored back; no shared memory
extern "C" __global__ void __launch_bounds__(32 * TEAM, 4) probe_ldst(const __grid_constant__ Probe a) {
  const int warp = threadIdx.x >> 5;
  const Walk w = walk_of(a);
  for (int i = w.i; i < w.end; i += w.step) {
    float* t = tile_at(a, i, warp);
    float4 h[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int m = 0; m < 4; ++m) h[q][m] = *reinterpret_cast<const float4*>(t + lane_offset(a, q, m));
    store_regs(a, t, h, a.scale);
  }
}

// ldst_half: the same in two halves of 4 KB (8 loads in flight a lane), at 32 warps per SM
extern "C" __global__ void __launch_bounds__(32 * TEAM, 8) probe_ldst_half(const __grid_constant__ Probe a) {
  const int warp = threadIdx.x >> 5;
  const Walk w = walk_of(a);
  for (int i = w.i; i < w.end; i += w.step) {
    float* t = tile_at(a, i, warp);
#pragma unroll
    for (int half = 0; half < 4; half += 2) {
      float4 h[2][4];
#pragma unroll
      for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int m = 0; m < 4; ++m) h[q][m] = *reinterpret_cast<const float4*>(t + lane_offset(a, half + q, m));
#pragma unroll
      for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float4 v = h[q][m];
          *reinterpret_cast<float4*>(t + lane_offset(a, half + q, m)) =
              make_float4(v.x * a.scale, v.y * a.scale, v.z * a.scale, v.w * a.scale);
        }
    }
  }
}

// tma: gdn_fold.cu's pattern: the next tile's bulk copy issued as soon as this one is in registers, stores
// from registers; BARRIER: the team's __syncthreads per item as well. BULK_STORE (tma_bulkstore): registers
// written back to the tile's shared buffer and bulk-stored from it, the next tile's bulk copy into that buffer
// issued once the store has read it (one buffer a warp, as gdn_fold.cu has)
template <bool BARRIER, bool BULK_STORE>
__device__ __forceinline__ void tma_body(const Probe& a) {
  extern __shared__ __align__(128) float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const Walk w = walk_of(a);
  float* tile = smem + warp * TILE;
  const unsigned bar = smem_addr(smem + TEAM * TILE) + 8 * warp;
  if (lane == 0) mbar_init(bar);
  __syncwarp();
  int i = w.i;
  if (lane == 0 && i < w.end) load_tile(smem_addr(tile), tile_at(a, i, warp), bar);
  unsigned parity = 0;
  for (; i < w.end; i += w.step) {
    if (BARRIER) __syncthreads();
    mbar_wait(bar, parity);
    parity ^= 1;
    float4 h[4][4];
    lds_tile(a, h, tile);
    if (BULK_STORE) {
      store_regs(a, tile, h, a.scale);  // the folded state back into the buffer
      fence_async();
    }
    __syncwarp();
    if (lane == 0) {
      if (BULK_STORE) {
        store_tile_bulk(tile_at(a, i, warp), smem_addr(tile));
        bulk_read_done();
      }
      if (i + w.step < w.end) load_tile(smem_addr(tile), tile_at(a, i + w.step, warp), bar);
    }
    if (BULK_STORE) __syncwarp();
    else store_regs(a, tile_at(a, i, warp), h, a.scale);
  }
  if (BULK_STORE && lane == 0) bulk_all_done();
}
extern "C" __global__ void __launch_bounds__(32 * TEAM, 4) probe_tma(const __grid_constant__ Probe a) { tma_body<false, false>(a); }
extern "C" __global__ void __launch_bounds__(32 * TEAM, 4) probe_tma_bar(const __grid_constant__ Probe a) { tma_body<true, false>(a); }
extern "C" __global__ void __launch_bounds__(32 * TEAM, 4) probe_tma_bulkstore(const __grid_constant__ Probe a) {
  tma_body<false, true>(a);
}

// tma2: two buffers a warp: the next tile loads into one while this one is bulk-stored from the other
extern "C" __global__ void __launch_bounds__(32 * TEAM, 3) probe_tma2(const __grid_constant__ Probe a) {
  extern __shared__ __align__(128) float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const Walk w = walk_of(a);
  float* tiles = smem + warp * 2 * TILE;
  const unsigned bars = smem_addr(smem + 2 * TEAM * TILE) + 16 * warp;
  if (lane == 0) {
    mbar_init(bars);
    mbar_init(bars + 8);
  }
  __syncwarp();
  int i = w.i, buf = 0;
  unsigned parity[2] = {0, 0};
  if (lane == 0 && i < w.end) load_tile(smem_addr(tiles), tile_at(a, i, warp), bars);
  for (; i < w.end; i += w.step, buf ^= 1) {
    if (lane == 0 && i + w.step < w.end) {
      bulk_read_done();  // the other buffer's store (two items back) has been read
      load_tile(smem_addr(tiles + (buf ^ 1) * TILE), tile_at(a, i + w.step, warp), bars + 8 * (buf ^ 1));
    }
    mbar_wait(bars + 8 * buf, parity[buf]);
    parity[buf] ^= 1;
    float4 h[4][4];
    lds_tile(a, h, tiles + buf * TILE);
    store_regs(a, tiles + buf * TILE, h, a.scale);
    fence_async();
    __syncwarp();
    if (lane == 0) store_tile_bulk(tile_at(a, i, warp), smem_addr(tiles + buf * TILE));
    __syncwarp();
  }
  if (lane == 0) bulk_all_done();
}
