#pragma once
// Inline PTX the bf16 GEMM kernels share (gemm_mma.cu, gemm_skinny.cu): asynchronous copies into
// shared memory, mbarriers, ldmatrix and the m16n8k16 tensor-core step. sm_90 (the bulk and tensor
// copies and fence.mbarrier_init); the rest is sm_80.
#include <cstdint>

namespace parity::cuda::ptx {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// The GPU's nanosecond clock (%globaltimer): the same on every SM, for waits measured in time.
__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- cp.async: 16 bytes per thread, L2 only --------------------------------------------------
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid = true) {
  const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// One arrival on `bar` once every cp.async this thread issued before has landed. The arrival is
// not added to the barrier's expected count (.noinc): the count given at init must include it.
__device__ __forceinline__ void cp_async_arrive(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// ---- mbarriers ---------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Ends a barrier's life so that its word may be initialised again (no arrival or copy pending on it).
__device__ __forceinline__ void mbar_inval(std::uint64_t* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Makes initialised barriers visible to the asynchronous (bulk copy) unit; a __syncthreads must follow.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// The async proxy (TMA writes, wgmma reads) and the generic proxy (ordinary loads and stores) see
// shared memory in separate orders: after generic stores a wgmma will read, this fence.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives and expects `bytes` more of bulk-copy completions before the phase may complete.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Returns once the phase of parity `parity` has completed (the first phase has parity 0).
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, unsigned parity) {
  const unsigned a = smem_addr(bar);
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}
// mbar_wait; when PROBE also adds the cycles it took to `waited` (the decode GEMMs' in-kernel probes).
template <bool PROBE>
__device__ __forceinline__ void mbar_wait_timed(std::uint64_t* bar, unsigned parity, long long& waited) {
  if constexpr (PROBE) {
    const long long a = clock64();
    mbar_wait(bar, parity);
    waited += clock64() - a;
  } else {
    mbar_wait(bar, parity);
  }
}
// Whether the phase of parity `parity` has completed, without waiting (mbarrier.test_wait: acquire
// when it says yes, like mbar_wait).
__device__ __forceinline__ bool mbar_test(std::uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// One arrival on `bar` from lane 0 of the warp, predicated rather than branched.
__device__ __forceinline__ void mbar_arrive_lane0(std::uint64_t* bar, int lane) {
  asm volatile(
      "{\n .reg .pred p;\n setp.eq.u32 p, %1, 0;\n @p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(
          smem_addr(bar)),
      "r"(lane)
      : "memory");
}

// ---- bulk copy (the TMA unit, one dimension): `bytes` (a multiple of 16, both ends 16-byte aligned)
// from global to shared memory; completion counts `bytes` off `bar`'s expected transactions.
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, unsigned bytes, std::uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// ---- tensor copy (the TMA unit through a tensor map, sm_90): the box at coordinates (c0, c1, c2)
// (c0 innermost) of the tensor `map` describes, into shared memory at `dst` (a shared-window
// address); elements outside the tensor land as zeros and still count. Completion counts the box's
// bytes off `bar`'s expected transactions.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const void* map, int c0, int c1, int c2, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// L2 eviction policies for the cache-hinted copies below: evict_first for data read once (weights
// streamed past), evict_last for small data read soon after (a step's state and parameters).
__device__ __forceinline__ std::uint64_t l2_evict_first() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ std::uint64_t l2_evict_last() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
// tma_load_3d with an L2 policy.
__device__ __forceinline__ void tma_load_3d_hint(unsigned dst, const void* map, int c0, int c1, int c2,
                                                 std::uint64_t* bar, std::uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, "
      "%4}], [%5], %6;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
// Asks L2 for `bytes` (a multiple of 16, 16-byte aligned) at gmem, kept by `policy`.
__device__ __forceinline__ void bulk_prefetch_l2(const void* gmem, unsigned bytes, std::uint64_t policy) {
  asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;\n" ::"l"(gmem), "r"(bytes), "l"(policy)
               : "memory");
}

// Asks L2 for the box at (c0, c1, c2) of the tensor `map` describes (no shared memory, no barrier):
// a later tma_load_3d of it then reads L2 instead of DRAM.
__device__ __forceinline__ void tma_prefetch_l2_3d(const void* map, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(map), "r"(c0), "r"(c1),
               "r"(c2)
               : "memory");
}

// Orders what the generic proxy wrote of a tensor map in global memory (the host's copy before the
// launch) before the TMA unit reads it: once per map, before its first copy.
__device__ __forceinline__ void fence_tensormap_acquire(const void* map) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(map) : "memory");
}

// Fetches a tensor map (a kernel's __grid_constant__ parameter) into the TMA unit's descriptor cache
// ahead of its first use.
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// ---- tensor cores ------------------------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(const void* smem, unsigned (&r)[4]) { ldmatrix_x4(smem_addr(smem), r); }
// The same four 8×8 matrices transposed: lane g·4+q gets rows 2q, 2q+1 of column g (a k16n8 operand's
// fragment from a row-major [k][n] tile).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two floats from shared memory (a shared-window address, 8-byte aligned).
__device__ __forceinline__ float2 ld_shared_f2(unsigned addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

// c += a · b, one 16×8×16 step: a is the m16k16 fragment (rows g and g+8 of lane g·4+q, columns
// 2q, 2q+1 and 2q+8, 2q+9), b the k16n8 fragment (column g, rows 2q, 2q+1 and 2q+8, 2q+9), c the
// fp32 m16n8 accumulator (rows g, g+8, columns 2q, 2q+1).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace parity::cuda::ptx
