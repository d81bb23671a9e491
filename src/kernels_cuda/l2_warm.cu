#include "kernels_cuda/l2_warm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ptx.cuh"

namespace parity::cuda {
namespace {

std::atomic<int> warm_mode{0};
std::atomic<unsigned> warm_delay{0}, warm_piece{1024};

constexpr int kMaxDevices = 16;
struct Side {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
Side sides[kMaxDevices];

Side& side() {
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  return sides[dev % kMaxDevices];
}

__device__ __forceinline__ void prefetch_l2(const unsigned char* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ void sleep_ns(unsigned long long ns) {
  if (ns == 0) return;
  const unsigned long long t0 = ptx::global_timer_ns();
  while (ptx::global_timer_ns() - t0 < ns) __nanosleep(256);
}

// One thread a row, each row's pieces in order: across the grid, column slices in order.
// With states: thread g first asks for piece g of the states (32 KiB each, slot by slot).
__global__ void warm_rows_kernel(const unsigned char* base, int rows, unsigned long long row_bytes, unsigned piece,
                                 unsigned long long delay_ns, L2WarmStates st) {
  sleep_ns(delay_ns);
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (st.base != nullptr) {
    const unsigned long long per = (st.bytes_a_slot + 32767) / 32768;
    if (static_cast<unsigned long long>(r) < per * st.seqs) {
      const unsigned long long k = static_cast<unsigned long long>(r) % per, off = k * 32768ull;
      const auto* slot = static_cast<const unsigned char*>(st.base) +
                         static_cast<unsigned long long>(st.slot[r / per]) * st.bytes_a_slot;
      prefetch_l2(slot + off, static_cast<unsigned>(st.bytes_a_slot - off < 32768ull ? st.bytes_a_slot - off : 32768ull));
    }
  }
  if (r >= rows) return;
  const unsigned char* row = base + static_cast<unsigned long long>(r) * row_bytes;
  for (unsigned long long off = 0; off < row_bytes; off += piece)
    prefetch_l2(row + off, static_cast<unsigned>(row_bytes - off < piece ? row_bytes - off : piece));
}

// One thread a 32 KiB piece, the range front to back.
__global__ void warm_range_kernel(const unsigned char* base, unsigned long long bytes, unsigned long long delay_ns) {
  sleep_ns(delay_ns);
  const unsigned long long p = (static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x) * 32768ull;
  if (p >= bytes) return;
  prefetch_l2(base + p, static_cast<unsigned>(bytes - p < 32768ull ? bytes - p : 32768ull));
}

}  // namespace

void set_l2_warm(int mode, unsigned delay_ns, unsigned piece) {
  if (mode != 0) {
    Side& sd = side();
    if (sd.stream == nullptr) {
      cuda_check(cudaStreamCreateWithFlags(&sd.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      cuda_check(cudaEventCreateWithFlags(&sd.fork, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      cuda_check(cudaEventCreateWithFlags(&sd.join, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
  }
  warm_delay.store(delay_ns);
  warm_piece.store(piece < 16 ? 16 : piece / 16 * 16);
  warm_mode.store(mode);
}

int l2_warm_mode() { return warm_mode.load(); }

unsigned l2_warm_key() {
  const int mode = warm_mode.load();
  if (mode == 0) return 0;
  return static_cast<unsigned>(mode) | (warm_piece.load() / 16) << 4 | (warm_delay.load() / 64) << 16;
}

bool warm_l2_beside(const L2WarmRows& w, const L2WarmStates& states, cudaStream_t s) {
  const int mode = warm_mode.load();
  if (mode == 0) return false;
  Side& sd = side();
  const auto aligned = [](const void* p, std::size_t bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && bytes % 16 == 0;
  };
  if (sd.stream == nullptr || w.rows <= 0 || !aligned(w.base, w.row_bytes) ||
      (mode == 3 && states.base != nullptr && !aligned(states.base, states.bytes_a_slot)))
    return false;
  cuda_check(cudaEventRecord(sd.fork, s), "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(sd.stream, sd.fork, 0), "cudaStreamWaitEvent");
  const auto* base = static_cast<const unsigned char*>(w.base);
  const unsigned long long delay = warm_delay.load();
  // One warp a block: the bulk prefetch takes uniform operands, so a warp issues its lanes' requests one
  // after another; many small blocks spread them over many SMs' copy units.
  if (mode == 1 || mode == 3) {
    const L2WarmStates st = mode == 3 ? states : L2WarmStates{};
    const int threads = std::max(w.rows, st.base ? static_cast<int>((st.bytes_a_slot + 32767) / 32768) * st.seqs : 0);
    warm_rows_kernel<<<(threads + 31) / 32, 32, 0, sd.stream>>>(base, w.rows, w.row_bytes, warm_piece.load(), delay, st);
  } else {
    const unsigned long long bytes = static_cast<unsigned long long>(w.rows) * w.row_bytes;
    const unsigned long long pieces = (bytes + 32767) / 32768;
    warm_range_kernel<<<static_cast<unsigned>((pieces + 31) / 32), 32, 0, sd.stream>>>(base, bytes, delay);
  }
  check_launch("warm_l2");
  cuda_check(cudaEventRecord(sd.join, sd.stream), "cudaEventRecord");
  return true;
}

void join_l2_warm(cudaStream_t s) {
  Side& sd = side();
  cuda_check(cudaStreamWaitEvent(s, sd.join, 0), "cudaStreamWaitEvent");
}

}  // namespace parity::cuda
