// The overlay's GDN ReplaySSM commit as one CUDA kernel (sm_90): fold each row's accepted raw window into
// its fp32 state, roll the conv windows back, store the track slot, bitwise equal to SGLang 0.5.19's decode
// recurrence (`fused_sigmoid_gating_delta_rule_update`) run token by token. The default commit where it
// loads (fold.py); the Triton kernel (gdn_fold.py) computes the same function from the same arguments.
//
// Why CUDA beside the Triton kernel: Triton infers layouts and shared memory, so its kernel l2-normalizes
// k again in every thread, and its programs load their state tiles into registers in lock step, so the
// state traffic adds to the compute instead of hiding under it (notes/perf.md, v4/v5). Here
//   - a block is a team of TEAM warps (a persistent program, or one per item: the host's choice of grid,
//     cuda_fold.grid_size): each warp folds one column block of the team's value head, and the bulk copy
//     (cp.async.bulk on an mbarrier) of its next 8 KB state tile into shared memory is in flight while it
//     folds the current one from registers;
//   - each step's k is l2-normalized once per team (8 lanes a step, rounds of 4 steps dealt round the warps)
//     into shared memory, the next item's while this one folds, and read back broadcast; the raw v of 16 steps is
//     loaded at once, spread over the lanes, and a step's is shuffled out of it; each step's decay is
//     computed once per item and team, by the lanes that normalize that step, into shared memory with its beta;
//   - the conv rollback loads a lane's 16 elements before it stores any (one memory latency per unit), a unit
//     after each item a warp folds;
//   - a block walks its items with a mixed-radix cursor (no division per item), and prefetches the next
//     item's gates and raw v rows into L2 while it folds the current one.
// Every fp32 operation is the PTX instruction the decode kernel's Triton compile has (mul.rn, add.rn,
// sub.rn, fma.rn, ex2.approx, sqrt.approx.ftz, div.full), in its association, so ptxas has nothing to
// contract or reorder: that is what makes it bitwise, not the layout.
//
// The reduction tree (decode kernel, K = 128, Triton 3.6 and 3.7; gdn_fold.py says how it was read): with
// k = 4 i + j, each sum over k is a chain per group i, fma(x3,y3, fma(x2,y2, fma(x0,y0, x1*y1))), then a
// butterfly over i pairing i ^ 16, ^ 8, ^ 4, ^ 2, ^ 1 in that order. The norm: lane l holds the groups
// i = l % 8 + 8 m, m < 4, of one step, so i ^ 16 and i ^ 8 are inside the thread and i ^ 4 .. i ^ 1 shuffles
// (NORM_LANES). The fold: lane l holds the groups i = NA m + (l % NA), m < MG, of
// the CQ columns CQ (l / NA) .. CQ (l / NA) + CQ - 1 of its item, so the levels i ^ 16 .. i ^ NA pair m's
// bits inside the thread (depth first: see the step loop) and i ^ (NA / 2) .. i ^ 1 are shuffles.
// The build (nvrtc.py) uses the defaults below: NA = 8 lanes x 4 columns, 16 k x 4 columns = 64 state values
// per thread, 16 columns per item, teams of 4 warps, 16 warps per SM (12 with a track slot); notes/perf.md
// has the other layouts measured. A warp's raw v window (VWin) needs 16 columns per item: NA = 4 lanes x 2
// columns also builds, layouts of other widths do not.
//
// Shapes (per tensor-parallel rank, as gdn_fold.py): state [L, S, HV, V, K] fp32 (k fastest), rawv
// [L, S, HV, RL, V] bf16, rawk [L, S, H, RL, K] bf16, gate/beta [L, S, HV, RL] fp32, conv dst [L, S, dim, W]
// and its window view src [L, rows, steps, dim, W] (any strides), index vectors [B] int32 or int64 (the
// caller's tensors as given: bit j of `wide_indices` says index vector j is int64).
// Work: a team item is (layer, row, value head, TEAM blocks of COLS columns), a conv unit is CONV_CHUNK
// elements of one (layer, row)'s window; block p of P takes team items p, p + P, ..., and its warp w conv
// units p TEAM + w, stepping by P TEAM, one after each item and the rest after the last. What the host checks
// first (cuda_fold.py): K = 128, V % (COLS TEAM) == 0, RL <= 32, 16-byte aligned state and rings, 2- or 4-byte
// conv elements.

#define K_DIM 128
#define CONV_PER_LANE 16                   // conv elements each lane copies per conv unit
#define CONV_CHUNK (32 * CONV_PER_LANE)    // conv elements per conv unit
#ifndef LANE_A_BITS
#define LANE_A_BITS 3                      // low bits of the group index i on the lanes
#endif
#ifndef CQ
#define CQ 4                               // columns per thread (2 or 4)
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 16                      // warps per SM the registers are budgeted for (128 each)
#endif
#ifndef MIN_BLOCKS_TRACK
#define MIN_BLOCKS_TRACK 12                // the same with a track slot (168 each: at 128 they spill)
#endif
#ifndef TEAM
#define TEAM 4                             // warps per block: they fold the column blocks of one value head
#endif                                     // and share the normalization of its k window
#ifndef TEAM_TRACK
#define TEAM_TRACK 4                       // the same with a track slot
#endif
#define NA (1 << LANE_A_BITS)              // lanes per column group
#define MG (32 >> LANE_A_BITS)             // groups of 4 k per thread and column
#define COLS (CQ * 32 / NA)                // columns per fold item (one warp)
#define TILE_FLOATS (COLS * K_DIM)         // contiguous in the state
#ifndef SHARE_HELD
#define SHARE_HELD 1                       // rounds (4 steps) of its share of the next item's raw k a warp holds
#endif                                     // while it folds
#ifndef SHARE_HELD_TRACK
#define SHARE_HELD_TRACK 1                 // the same with a track slot
#endif

// the warps per block of the kernels without and with a track slot, for the host (cuda_fold.LoadedFold)
extern "C" __constant__ int gdn_fold_team[2] = {TEAM, TEAM_TRACK};

struct FoldArgs {  // the Triton kernel's runtime arguments, in its order, then the grid it had
  float* state;
  const unsigned short* rawv;
  const unsigned short* rawk;
  const unsigned char* conv_src;
  unsigned char* conv_dst;
  const float* gate;
  const float* beta;
  const void* slots;  // the index vectors, int32 or int64 (wide_indices)
  const void* accept_lens;
  const void* track_slots;
  const void* track_steps;
  int state_layer_tiles, state_slot_tiles, rawv_layer_rows, rawv_slot_rows, rawk_layer_rows, rawk_slot_rows;
  int gate_layer_stride, gate_slot_stride, HV, GROUP, V, RL;
  int conv_elems, conv_width, conv_chunk, conv_src_layer, conv_src_row, conv_src_step, conv_src_dim;
  int conv_src_win, conv_dst_layer, conv_dst_slot, conv_rows, conv_steps, conv_slots;
  int layers, batch;
  int wide_indices;  // bit 0: slots, 1: accept_lens, 2: track_slots, 3: track_steps are int64, else int32
};

// element `row` of index vector `which` (its bit in wide_indices), as the int32 copy of it would hold: the
// low word of an int64 element (little endian), without a branch
__device__ __forceinline__ int index_at(const FoldArgs& a, const void* v, int which, int row) {
  const int shift = 2 + ((a.wide_indices >> which) & 1);
  return __ldg(reinterpret_cast<const int*>(reinterpret_cast<const char*>(v) + ((long long)row << shift)));
}
__device__ __forceinline__ int slot_of(const FoldArgs& a, int row) { return index_at(a, a.slots, 0, row); }
__device__ __forceinline__ int accepted_of(const FoldArgs& a, int row) { return index_at(a, a.accept_lens, 1, row); }
__device__ __forceinline__ int track_slot_of(const FoldArgs& a, int row) { return index_at(a, a.track_slots, 2, row); }
__device__ __forceinline__ int track_step_of(const FoldArgs& a, int row) { return index_at(a, a.track_steps, 3, row); }

// ---- the decode kernel's fp32 instructions, one each
__device__ __forceinline__ float mul_rn(float a, float b) { float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float add_rn(float a, float b) { float r; asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float sub_rn(float a, float b) { float r; asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float fma_rn(float a, float b, float c) { float r; asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c)); return r; }
__device__ __forceinline__ float ex2_approx(float a) { float r; asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
__device__ __forceinline__ float sqrt_approx_ftz(float a) { float r; asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
__device__ __forceinline__ float div_full(float a, float b) { float r; asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }

__device__ __forceinline__ float decay_of(float g) { return ex2_approx(mul_rn(g, __int_as_float(0x3FB8AA3B))); }

__device__ __forceinline__ float bf16_lo(unsigned int w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned int w) { return __uint_as_float(w & 0xffff0000u); }

// x0*y0 + x1*y1 + x2*y2 + x3*y3 as the decode kernel's chain for one group
__device__ __forceinline__ float chain4(float4 x, float4 y) {
  float s = fma_rn(x.x, y.x, mul_rn(x.y, y.y));
  s = fma_rn(x.z, y.z, s);
  return fma_rn(x.w, y.w, s);
}

// ---- bulk copy global -> shared on an mbarrier (one thread issues, every lane waits)
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// every lane waits until the phase of `parity` is complete; the loop's exit is decided for the whole warp, so
// the compiler knows it converged there (with a per-lane exit it guards each later shuffle against divergence)
__device__ __forceinline__ bool mbar_done(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0;
}

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  while (!__all_sync(0xffffffffu, mbar_done(bar, parity))) {
  }
}

// ---- work items: team item i is (layer, row, k head, value head of the k head, chunk) in the mixed radix
// (batch, H, GROUP, chunks), and a block walks i, i + P, ... adding P's digits with carries: no division per
// item (a division by a runtime value is ~25 instructions; before, a block did about ten per item)
struct Radix {
  int chunks, group, heads, batch;  // the team's column chunks per value head, value heads per k head, H, B
};

struct Item {
  int i;                           // the team item (>= total: none)
  int chunk, hg, kh, row, layer;   // chunk: the team's TEAM column blocks (warp w folds block chunk * TEAM + w)
  int hv;                          // kh GROUP + hg
  int slot, accepted;              // the row's, read by next_item
};

__device__ __forceinline__ Item item_at(int i, const Radix& r) {
  Item x;
  x.i = i;
  x.chunk = i % r.chunks;
  i /= r.chunks;
  x.hg = i % r.group;
  i /= r.group;
  x.kh = i % r.heads;
  i /= r.heads;
  x.row = i % r.batch;
  x.layer = i / r.batch;
  x.hv = x.kh * r.group + x.hg;
  x.slot = x.accepted = 0;
  return x;
}

// one digit of x + step: the digits of both are below the radix, so the sum carries at most one
__device__ __forceinline__ int add_digit(int& digit, int step, int carry, int radix) {
  digit += step + carry;
  carry = digit >= radix;
  digit -= carry ? radix : 0;
  return carry;
}

__device__ __forceinline__ void advance(Item& x, const Item& step, const Radix& r) {
  x.i += step.i;
  int carry = add_digit(x.chunk, step.chunk, 0, r.chunks);
  carry = add_digit(x.hg, step.hg, carry, r.group);
  carry = add_digit(x.kh, step.kh, carry, r.heads);
  carry = add_digit(x.row, step.row, carry, r.batch);
  x.layer += step.layer + carry;
  x.hv = x.kh * r.group + x.hg;
}

// x, or the first item after it (stepping by `step`) whose row folds anything; x.i >= total where none is
__device__ __forceinline__ void next_item(Item& x, const Item& step, int total, const FoldArgs& a, const Radix& r) {
  for (; x.i < total; advance(x, step, r)) {
    x.slot = slot_of(a, x.row);
    x.accepted = accepted_of(a, x.row);
    if (x.slot >= 0 && x.accepted > 0) return;
  }
}

// the first of item x's gates (and betas): its row's steps are contiguous
__device__ __forceinline__ long long gate_row(const FoldArgs& a, const Item& x) {
  return (long long)x.layer * a.gate_layer_stride + (long long)x.slot * a.gate_slot_stride + (long long)x.hv * a.RL;
}

__device__ __forceinline__ long long tile_offset(const FoldArgs& a, int layer, int hv, long long slot, int block) {
  return ((long long)layer * a.state_layer_tiles + hv + slot * a.state_slot_tiles) * (long long)(K_DIM) * a.V +
         (long long)block * TILE_FLOATS;
}

// ---- the conv rollback: dst[layer, slot].flat[e] = src[layer, row, step] at (e / W, e % W). A unit is
// CONV_CHUNK elements of one (layer, row)'s window; each lane loads its CONV_PER_LANE elements of it before it
// stores any (one memory latency per unit, not one per element).
template <typename E>
struct ConvCopy {  // this lane's part of one window's unit, loaded and not yet stored
  E vals[CONV_PER_LANE];
  E* dst;  // the unit's first element in the pool; null where the slot or step is out of range (nothing to copy)
};

template <typename E>
__device__ __forceinline__ ConvCopy<E> load_window(const FoldArgs& a, int layer, int row, int slot, int step,
                                                   int start) {
  ConvCopy<E> c;
  const bool copies = slot >= 0 && slot < a.conv_slots && step >= 0 && step < a.conv_steps && row < a.conv_rows;
  const E* src = reinterpret_cast<const E*>(a.conv_src) + (long long)layer * a.conv_src_layer +
                 (long long)row * a.conv_src_row + (long long)step * a.conv_src_step;
  c.dst = copies ? reinterpret_cast<E*>(a.conv_dst) + (long long)layer * a.conv_dst_layer +
                       (long long)slot * a.conv_dst_slot + start
                 : nullptr;
  const int e0 = start + (int)(threadIdx.x & 31), W = a.conv_width;
  const int d_step = 32 / W, w_step = 32 - d_step * W;  // (d, w) of e + 32 from those of e
  int d = e0 / W, w = e0 - (e0 / W) * W;
#pragma unroll
  for (int j = 0; j < CONV_PER_LANE; ++j) {  // every element set on every path (an unset one is carried over
    c.vals[j] = copies && e0 + 32 * j < a.conv_elems  // from the unit before, in registers through the fold)
                    ? src[(long long)d * a.conv_src_dim + (long long)w * a.conv_src_win] : E(0);
    d += d_step;
    w += w_step;
    if (w >= W) {
      w -= W;
      ++d;
    }
  }
  return c;
}

template <typename E>
__device__ __forceinline__ void store_window(const FoldArgs& a, const ConvCopy<E>& c, int start) {
  if (!c.dst) return;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < CONV_PER_LANE; ++j)
    if (start + lane + 32 * j < a.conv_elems) c.dst[lane + 32 * j] = c.vals[j];
}

// A warp's walk over the conv units: warp w of block p of P takes units p TEAM + w, stepping by P TEAM, one
// after each item it folds (its loads' latency then passes under the other blocks' folds, where all of them
// before the first item waited together) and the rest after its last. Only the cursor lives across an item.
template <typename E, bool HAS_TRACK>
struct ConvWalk {
  int u = blockIdx.x * blockDim.x / 32;  // the block's next unit, less its warp (the same in all its warps)

  __device__ __forceinline__ static int per_row(const FoldArgs& a) {
    return (a.conv_elems + CONV_CHUNK - 1) / CONV_CHUNK;
  }
  __device__ __forceinline__ bool more(const FoldArgs& a) const {
    return u + (int)(threadIdx.x >> 5) < a.layers * a.batch * per_row(a);
  }
  // unit u + warp (more() is true): the row's window, and its track slot's, then on to the block's next unit
  __device__ __forceinline__ void copy(const FoldArgs& a) {
    const int unit = u + (int)(threadIdx.x >> 5), rest = unit / per_row(a);
    const bool real = rest < a.layers * a.batch;  // (more() says so; spelled out, it spares a spill of 4 bytes)
    const int row = real ? rest % a.batch : 0, layer = rest / a.batch, start = (unit - rest * per_row(a)) * CONV_CHUNK;
    ConvCopy<E> c[HAS_TRACK ? 2 : 1];  // the row's slot's window and its track slot's
    c[0] = load_window<E>(a, layer, row, real ? slot_of(a, row) : -1, accepted_of(a, row) - 1, start);
    if (HAS_TRACK)
      c[HAS_TRACK] = load_window<E>(a, layer, row, real ? track_slot_of(a, row) : -1, track_step_of(a, row), start);
#pragma unroll
    for (int j = 0; j < (HAS_TRACK ? 2 : 1); ++j) store_window<E>(a, c[j], start);
    u += gridDim.x * blockDim.x / 32;
  }
};

__device__ __forceinline__ void store_tile(float* dst, const float4 (&h)[CQ][MG], int pair, int asub) {
#pragma unroll
  for (int q = 0; q < CQ; ++q)
#pragma unroll
    for (int m = 0; m < MG; ++m)
      *reinterpret_cast<float4*>(dst + (CQ * pair + q) * K_DIM + 4 * (m * NA + asub)) = h[q][m];
}

// m with its low log2(MG) bits reversed: the order that evaluates the in-thread tree depth first
__device__ __forceinline__ constexpr int bit_reversed(int x) {
  int m = 0;
  for (int b = 1, r = MG >> 1; b < MG; b <<= 1, r >>= 1) m |= (x & b) ? r : 0;
  return m;
}

// Shared memory of a block (`cuda_fold.smem_bytes`: 48 KB for 4 warps at 16 columns and a 16-step window):
// each warp's state tile of the item it folds next, the block's normalized k of two items' windows, and
// each warp's mbarrier its tile's bulk copy completes on. A warp's view of it:
struct Smem {
  float* tile;   // [TILE_FLOATS], this warp's
  float* knorm;  // [2][RL][K_DIM], the block's: the item folding and the next
  float* gates;  // [2][2][RL], the block's: the same items' decays, then betas
  unsigned bar;  // this warp's
};

__device__ __forceinline__ Smem carve(unsigned char* base, int warp, int team, int RL) {
  Smem m;
  float* tiles = reinterpret_cast<float*>(base);
  m.tile = tiles + warp * TILE_FLOATS;
  m.knorm = tiles + team * TILE_FLOATS;
  m.gates = m.knorm + 2 * RL * K_DIM;
  m.bar = smem_addr(m.gates + 4 * RL) + 8 * warp;
  return m;
}

// lane 0: the bulk copy of the state tile of item x's column block `block`
__device__ __forceinline__ void stage_tile(const FoldArgs& a, const Smem& m, const Item& x, int block) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // after this warp's reads of the tile
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(m.bar), "r"(TILE_FLOATS * 4) : "memory");
  bulk_copy(smem_addr(m.tile), a.state + tile_offset(a, x.layer, x.hv, x.slot, block), TILE_FLOATS * 4, m.bar);
}

// lane 0: the same for this warp's column block of team item x
template <int NT>
__device__ __forceinline__ void stage_item(const FoldArgs& a, const Smem& m, const Item& x) {
  stage_tile(a, m, x, x.chunk * NT + (int)(threadIdx.x >> 5));
}

// a shared-memory read the compiler may not hoist out of its step (it would keep every step's k in registers,
// which costs occupancy); inside a step it may reuse the dot's read for the update, and does
__device__ __forceinline__ float4 lds4(unsigned addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}

// The normalization's layout: 8 lanes a step, so a warp normalizes 4 steps at once (a round). Lane l takes
// step l / 8 of the round and the groups i = l % 8 + 8 m, m < 4, of its k (16 values): the norm's levels
// i ^ 16 and i ^ 8 pair m's bits inside the thread (m ^ 2, then m ^ 1) and i ^ 4 .. i ^ 1 are shuffles. (One
// step a warp, a group a lane, took 5 dependent shuffles a step and ~35 instructions; this is 3 shuffles for
// 4 steps, ~19 instructions a step.)
#define NORM_LANES 8                   // lanes a step
#define NORM_STEPS (32 / NORM_LANES)   // steps a warp normalizes at once
#define NORM_GROUPS (32 / NORM_LANES)  // groups of 4 k a lane (K_DIM / 4 groups over NORM_LANES lanes)
static_assert(NORM_GROUPS == 4, "normalize_k adds the groups' levels i ^ 16 and i ^ 8 in the thread: 4 groups");

struct KRaw {  // this lane's raw k of one round: groups l % 8 + 8 m
  uint2 w[NORM_GROUPS];
};

// this lane's raw k of one step (`row`: the step's row at this lane's first group)
__device__ __forceinline__ KRaw load_kraw(const unsigned short* row) {
  KRaw r;
#pragma unroll
  for (int m = 0; m < NORM_GROUPS; ++m) r.w[m] = __ldg(reinterpret_cast<const uint2*>(row + 4 * NORM_LANES * m));
  return r;
}

// k / sqrt(sum k^2 + 1e-6) of this lane's step (its 8 lanes: the whole row) into the knorm row `out`
__device__ __forceinline__ void normalize_k(const KRaw& raw, float* out) {
  const int g = threadIdx.x & (NORM_LANES - 1);
  float4 k[NORM_GROUPS];
  float c[NORM_GROUPS];
#pragma unroll
  for (int m = 0; m < NORM_GROUPS; ++m) {
    k[m] = make_float4(bf16_lo(raw.w[m].x), bf16_hi(raw.w[m].x), bf16_lo(raw.w[m].y), bf16_hi(raw.w[m].y));
    c[m] = chain4(k[m], k[m]);
  }
  float ss = add_rn(add_rn(c[0], c[2]), add_rn(c[1], c[3]));  // i ^ 16, then i ^ 8
#pragma unroll
  for (int o = NORM_LANES >> 1; o >= 1; o >>= 1) ss = add_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));  // .., i ^ 1
  const float r = div_full(1.0f, sqrt_approx_ftz(add_rn(ss, 1e-6f)));
#pragma unroll
  for (int m = 0; m < NORM_GROUPS; ++m)
    *reinterpret_cast<float4*>(out + 4 * (g + NORM_LANES * m)) =
        make_float4(mul_rn(k[m].x, r), mul_rn(k[m].y, r), mul_rn(k[m].z, r), mul_rn(k[m].w, r));
}

// A warp's share of the normalization of one item's k window: the team's warps take its rounds warp, warp +
// NT, ... into the block's buffer. The raw k of the first HELD of them (a round is 8 registers) is loaded when
// the item is known, a whole item ahead, and held while the warp folds the item before it.
template <int HELD>
struct KShare {
  const unsigned short* p;  // this lane's raw k of step 0
  int steps;                // the item's steps to fold (its accepted ones, at most RL)
  KRaw k[HELD > 0 ? HELD : 1];
};

// this lane's step in round j of warp's share, or the item's last where that is past it (a lane redoes the last
// step rather than skip it, so that no branch around the norm's shuffles depends on the lane)
template <int NT>
__device__ __forceinline__ int share_step(int warp, int j, int steps) {
  return min(NORM_STEPS * (warp + j * NT) + (int)((threadIdx.x & 31) / NORM_LANES), steps - 1);
}
// (decided by a vote: the same in every lane, and the compiler then knows the norm's shuffles are converged; a
// per-lane condition made it guard them against divergence and keep the item cursor out of uniform registers)
template <int NT>
__device__ __forceinline__ bool share_round(int warp, int j, int steps) {
  return __any_sync(0xffffffffu, NORM_STEPS * (warp + j * NT) < steps);
}

template <int NT, int HELD>
__device__ __forceinline__ KShare<HELD> load_share(const FoldArgs& a, const Item& x, int warp) {
  KShare<HELD> s;
  s.p = a.rawk + ((long long)x.layer * a.rawk_layer_rows + (long long)x.slot * a.rawk_slot_rows +
                  (long long)x.kh * a.RL) * K_DIM + 4 * (threadIdx.x & (NORM_LANES - 1));
  s.steps = min(x.accepted, a.RL);  // at least 1: next_item skips rows that fold nothing
#pragma unroll
  for (int j = 0; j < HELD; ++j) s.k[j] = load_kraw(s.p + share_step<NT>(warp, j, s.steps) * K_DIM);
  return s;
}

// Round j normalizes share_step(warp, j) of each lane while round j is within the item (a redone step writes
// the same values into the same row), and the first lane of each step writes its decay and beta (their loads
// in flight while the step normalizes: they waited a memory latency where the fold starts). The rounds past
// HELD (windows past NT NORM_STEPS HELD steps; RL <= 32, the host checks) are loaded here: the fold's registers
// are free.
template <int NT, int HELD>
__device__ __forceinline__ void normalize_share(const FoldArgs& a, const Item& x, const KShare<HELD>& s, float* knorm,
                                                float* gates, int warp) {
  constexpr int ROUNDS = (32 + NORM_STEPS * NT - 1) / (NORM_STEPS * NT);
#pragma unroll
  for (int j = 0; j < ROUNDS; ++j)
    if (share_round<NT>(warp, j, s.steps)) {
      const int step = share_step<NT>(warp, j, s.steps);
      const long long gb = gate_row(a, x) + step;
      const float g = __ldg(a.gate + gb), b = __ldg(a.beta + gb);  // in flight while the step normalizes
      normalize_k(j < HELD ? s.k[j] : load_kraw(s.p + step * K_DIM), knorm + step * K_DIM);
      if ((threadIdx.x & (NORM_LANES - 1)) == 0) {  // the step's decay (once per item and team) and beta
        gates[step] = decay_of(g);
        gates[a.RL + step] = b;
      }
    }
}

// The step loop is unrolled by 4: its copies then know t % 4, the register that holds their step's raw v
// (VWin). Unrolled by 3 or 5, NVVM (NVRTC 13.0 and 12.9) compiles this loop, whose trip count is a min(), with
// no remainder: it runs a multiple of the unroll, up to 4 steps past the accepted ones, reading k rows past
// the buffers (past the block's shared memory: the PREFETCH=2 build's crash, notes/perf.md, "Levers tried") and, at
// windows of 31 or more, shuffling the gates of lane t % 32. Unrolls by 2, 4 and 8 keep their remainder (a
// loop; at 2 one peeled step) under both (the PTX and SASS, notes/perf.md).
#ifndef STEP_UNROLL
#define STEP_UNROLL 4
#endif
static_assert((STEP_UNROLL & (STEP_UNROLL - 1)) == 0, "STEP_UNROLL must be a power of two (see above)");

// A warp's raw v of 16 steps, spread over its lanes: a step's 16 columns are 8 bf16 pairs, and lane s holds,
// in register r, pair s % 8 of step 16 c + 4 (s / 8) + r (chunk c of the window; rows past the last accepted
// read the last accepted one). A step's pairs are then one shuffle each, where a load per step needed its
// 64-bit address (7 instructions) and a queue of registers.
static_assert(COLS == 16, "VWin holds 8 bf16 pairs per step");
struct VWin {
  unsigned w[4];
};

__device__ __forceinline__ VWin load_vwin(const unsigned short* p_v, int V, int first, int last) {
  const int lane = threadIdx.x & 31;
  VWin r;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    r.w[j] = __ldg(reinterpret_cast<const unsigned*>(p_v + (long long)min(first + 4 * (lane >> 3) + j, last) * V) +
                   (lane & 7));
  return r;
}

// bf16 pair `pair` of step t (every lane asks for step t: the register is the same in all of them)
__device__ __forceinline__ unsigned v_pair(const VWin& v, int t, int pair) {
  const int r = t & 3;  // a constant in the unrolled loop's copies, selects in its remainder
  const unsigned w = r == 0 ? v.w[0] : r == 1 ? v.w[1] : r == 2 ? v.w[2] : v.w[3];
  return __shfl_sync(0xffffffffu, w, 8 * ((t >> 2) & 3) + pair);
}

// lane t < the next item's steps: its gates of step t and this warp's raw v row of step t into L2 while this
// item folds (the normalization's gate loads after the fold and the raw v loads where the next item starts
// each waited a memory latency without: 3% of T=16 B=8; notes/perf.md)
template <int NT>
__device__ __forceinline__ void prefetch_item(const FoldArgs& a, const Item& x, int warp) {
  const int lane = threadIdx.x & 31;
  if (lane >= min(x.accepted, a.RL)) return;
  const long long slot = x.slot;
  const unsigned short* p_v = a.rawv + ((long long)x.layer * a.rawv_layer_rows + slot * a.rawv_slot_rows +
                                        (long long)x.hv * a.RL + lane) * a.V + (x.chunk * NT + warp) * COLS;
  const long long gb = gate_row(a, x) + lane;
  asm volatile("prefetch.global.L2 [%0];" :: "l"(p_v));
  asm volatile("prefetch.global.L2 [%0];" :: "l"(a.gate + gb));
  asm volatile("prefetch.global.L2 [%0];" :: "l"(a.beta + gb));
}

// One warp folds column block `block` of item x from its staged tile (`kw`: this lane's first group of the
// item's normalized k, step 0), stages its tile of item `next` when it has one, and stores the state (and
// the track slot's).
template <bool HAS_TRACK, int NT>
__device__ __forceinline__ void fold_item(const FoldArgs& a, const Smem& sm, const Item& x, int block, unsigned kw,
                                          const float* gates, unsigned& parity, const Item& next, bool has_next) {
  const int lane = threadIdx.x & 31, pair = lane >> LANE_A_BITS, asub = lane & (NA - 1);
  const long long slot = x.slot;
  const int n_commit = min(x.accepted, a.RL);
  const unsigned short* p_v = a.rawv + ((long long)x.layer * a.rawv_layer_rows + slot * a.rawv_slot_rows +
                                        (long long)x.hv * a.RL) * a.V + block * COLS;
  // lane t: step t's decay and beta, as the normalizing lanes computed them (the decode kernel's instructions on
  // the same g: the same bits)
  float decay_lane = 1.f, beta_lane = 0.f;
  if (lane < n_commit) {
    decay_lane = gates[lane];
    beta_lane = gates[a.RL + lane];
  }
  VWin vw = load_vwin(p_v, a.V, 0, n_commit - 1);  // steps 0 .. 15
  int track_step = -1;
  long long track_slot = -1;
  if (HAS_TRACK) {
    track_slot = track_slot_of(a, x.row);
    track_step = track_slot >= 0 ? track_step_of(a, x.row) : -1;
  }
  mbar_wait(sm.bar, parity);
  parity ^= 1;
  float4 h[CQ][MG];
#pragma unroll
  for (int q = 0; q < CQ; ++q)
#pragma unroll
    for (int m = 0; m < MG; ++m) h[q][m] = lds4(smem_addr(sm.tile + (CQ * pair + q) * K_DIM + 4 * (m * NA + asub)));
  __syncwarp();
  if (lane == 0 && has_next) stage_item<NT>(a, sm, next);  // into the tile just read
  // the decay shuffled to every lane one step early
  float decay_next = __shfl_sync(0xffffffffu, decay_lane, 0);

#pragma unroll STEP_UNROLL
  for (int t = 0; t < n_commit; ++t) {
    const unsigned kb = kw + t * (K_DIM * 4);  // this lane's first group of step t's k
    if (t > 0 && (t & 15) == 0) vw = load_vwin(p_v, a.V, t, n_commit - 1);  // windows past 16 steps
    float vr[CQ];
#pragma unroll
    for (int q = 0; q < CQ; q += 2) {
      const unsigned w = v_pair(vw, t, (CQ / 2) * pair + q / 2);
      vr[q] = bf16_lo(w);
      vr[q + 1] = bf16_hi(w);
    }
    const float b = __shfl_sync(0xffffffffu, beta_lane, t);
    const float decay = decay_next;
    decay_next = __shfl_sync(0xffffffffu, decay_lane, t + 1);  // past the window: unused

    // h *= exp(g); d = h^T k per column, the tree above evaluated depth first: x's bits reversed are m, and
    // part[q][l] holds the pending sum of level l (a binary counter's carries are the tree's additions)
    constexpr int LEVELS = 5 - LANE_A_BITS;
    float part[CQ][LEVELS], d[CQ];
#pragma unroll
    for (int x4 = 0; x4 < MG; ++x4) {
      const int m = bit_reversed(x4);
      const float4 kk = lds4(kb + 16 * m * NA);
#pragma unroll
      for (int q = 0; q < CQ; ++q) {
        float4 w = h[q][m];
        w = make_float4(mul_rn(w.x, decay), mul_rn(w.y, decay), mul_rn(w.z, decay), mul_rn(w.w, decay));
        h[q][m] = w;
        float sum = chain4(w, kk);
        int level = 0;
#pragma unroll
        for (int c = x4; c & 1; c >>= 1) sum = add_rn(part[q][level++], sum);  // i ^ 16, ^ 8, ...
        if (level < LEVELS) part[q][level] = sum; else d[q] = sum;
      }
    }
    float vv[CQ];
#pragma unroll
    for (int q = 0; q < CQ; ++q) {
      float dot = d[q];
#pragma unroll
      for (int o = NA >> 1; o >= 1; o >>= 1) dot = add_rn(dot, __shfl_xor_sync(0xffffffffu, dot, o));  // .., i ^ 1
      vv[q] = mul_rn(sub_rn(vr[q], dot), b);
    }
    // h += k v^T
#pragma unroll
    for (int m = 0; m < MG; ++m) {
      const float4 kk = lds4(kb + 16 * m * NA);
#pragma unroll
      for (int q = 0; q < CQ; ++q) {
        const float4 w = h[q][m];
        h[q][m] = make_float4(fma_rn(kk.x, vv[q], w.x), fma_rn(kk.y, vv[q], w.y), fma_rn(kk.z, vv[q], w.z),
                              fma_rn(kk.w, vv[q], w.w));
      }
    }
    if (HAS_TRACK && t == track_step)
      store_tile(a.state + tile_offset(a, x.layer, x.hv, track_slot, block), h, pair, asub);
  }
  store_tile(a.state + tile_offset(a, x.layer, x.hv, slot, block), h, pair, asub);
  __syncwarp();
}

// A block is a team of NT warps: it takes team items p, p + P, ..., one value head's NT column blocks each (P:
// the grid, the resident blocks or one per work unit). Per item: one barrier (the item's normalized window is
// complete, and no warp still reads the buffer the next one goes into), each warp folds its block, normalizes
// its share of the next item's window (and its decays and betas) into the other buffer, and copies a conv unit.
template <typename E, bool HAS_TRACK, int NT>
__device__ __forceinline__ void fold_body(const FoldArgs& a) {
  extern __shared__ __align__(128) unsigned char smem_base[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const Smem sm = carve(smem_base, warp, NT, a.RL);
  const int P = gridDim.x;
  const Radix r = {a.V / (COLS * NT), a.GROUP, a.HV / a.GROUP, a.batch};  // the host checks V % (COLS * NT) == 0
  const int total = a.layers * a.batch * a.HV * r.chunks;
  const Item step = item_at(P, r);
  const unsigned k_lane = smem_addr(sm.knorm) + 16 * (lane & (NA - 1));
  if (lane == 0) mbar_init(sm.bar);
  __syncwarp();

  Item it = item_at(blockIdx.x, r);
  next_item(it, step, total, a, r);
  if (lane == 0 && it.i < total) stage_item<NT>(a, sm, it);
  ConvWalk<E, HAS_TRACK> conv;
  constexpr int HELD = HAS_TRACK ? SHARE_HELD_TRACK : SHARE_HELD;
  if (it.i < total) normalize_share<NT, HELD>(a, it, load_share<NT, HELD>(a, it, warp), sm.knorm, sm.gates, warp);

  unsigned parity = 0;
  int buf = 0;
  while (it.i < total) {
    __syncthreads();  // buffer buf holds this item's normalized window; no warp reads buffer buf ^ 1 any more
    Item next = it;
    advance(next, step, r);
    next_item(next, step, total, a, r);
    const bool has_next = next.i < total;
    KShare<HELD> share;
    if (has_next) {
      share = load_share<NT, HELD>(a, next, warp);  // in flight while this item folds
      prefetch_item<NT>(a, next, warp);
    }
    fold_item<HAS_TRACK, NT>(a, sm, it, it.chunk * NT + warp, k_lane + buf * (a.RL * K_DIM * 4),
                             sm.gates + buf * 2 * a.RL, parity, next, has_next);
    if (has_next)
      normalize_share<NT, HELD>(a, next, share, sm.knorm + (buf ^ 1) * a.RL * K_DIM,
                                sm.gates + (buf ^ 1) * 2 * a.RL, warp);
    if (conv.more(a)) conv.copy(a);
    buf ^= 1;
    it = next;
  }
  while (conv.more(a)) conv.copy(a);  // the units past this block's items
}

#define FOLD_KERNEL(NAME, E, TRACK, NT, WARPS_PER_SM) \
  extern "C" __global__ void __launch_bounds__(32 * NT, WARPS_PER_SM / NT) NAME(const __grid_constant__ FoldArgs a) { \
    fold_body<E, TRACK, NT>(a); \
  }
static_assert(MIN_BLOCKS % TEAM == 0 && MIN_BLOCKS_TRACK % TEAM_TRACK == 0, "whole teams per SM");

FOLD_KERNEL(gdn_fold_conv2, unsigned short, false, TEAM, MIN_BLOCKS)
FOLD_KERNEL(gdn_fold_conv2_track, unsigned short, true, TEAM_TRACK, MIN_BLOCKS_TRACK)
FOLD_KERNEL(gdn_fold_conv4, unsigned int, false, TEAM, MIN_BLOCKS)
FOLD_KERNEL(gdn_fold_conv4_track, unsigned int, true, TEAM_TRACK, MIN_BLOCKS_TRACK)
