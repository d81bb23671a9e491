// Causal depthwise conv1d, one thread per (row, channel): the window is the slot's last K-1
// inputs followed by the call's rows, and the sum runs bias, then taps in ascending order with
// fmaf — the order of kernels/conv1d.cpp, so prefill and decode (and the CPU) agree bit for bit.
#include "kernels/math.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"

namespace parity::cuda {
namespace {

__global__ void conv_kernel(const float* in, int ld, int ch, const float* w, const float* bias, int K,
                            const float* state, PassSeqs p, bool silu, float* out) {
  const int r = blockIdx.x;
  const int s = p.row_seq[r];
  const int j = r - p.row0[s];  // row within the sequence's chunk
  const float* st = state + static_cast<std::size_t>(p.slot[s]) * (K - 1) * ch;
  for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < ch; c += gridDim.y * blockDim.x) {
    float acc = bias ? bias[c] : 0.0f;
    for (int i = 0; i < K; ++i) {
      const int q = j - (K - 1) + i;  // < 0: from the carried state
      const float v = q >= 0 ? in[static_cast<std::size_t>(p.row0[s] + q) * ld + c]
                             : st[static_cast<std::size_t>(K - 1 + q) * ch + c];
      acc = fmaf(w[static_cast<std::size_t>(c) * K + i], v, acc);
    }
    out[static_cast<std::size_t>(r) * ch + c] = silu ? kernels::silu_f(acc) : acc;
  }
}

// The new state: the last K-1 inputs of [old state | the call's rows], shifted in ascending order
// by one thread per channel, so reading old[i + n] never sees an already-overwritten value.
__global__ void conv_state_kernel(const float* in, int ld, int ch, int K, float* state, PassSeqs p) {
  const int s = blockIdx.x;
  float* st = state + static_cast<std::size_t>(p.slot[s]) * (K - 1) * ch;
  const int n = p.n[s];
  for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < ch; c += gridDim.y * blockDim.x)
    for (int i = 0; i < K - 1; ++i) {
      const int q = n - (K - 1) + i;
      st[static_cast<std::size_t>(i) * ch + c] =
          q >= 0 ? in[static_cast<std::size_t>(p.row0[s] + q) * ld + c] : st[static_cast<std::size_t>(i + n) * ch + c];
    }
}

}  // namespace

void conv1d(const float* in, int ld_in, int ch, const float* w, const float* bias, int K, float* conv_state,
            const PassSeqs& p, bool silu, float* out, cudaStream_t s) {
  if (p.num_rows <= 0) return;
  if (K < 1) throw Error("conv1d: kernel size must be at least 1");
  const unsigned cblocks = static_cast<unsigned>((ch + 255) / 256);
  conv_kernel<<<dim3(p.num_rows, cblocks), 256, 0, s>>>(in, ld_in, ch, w, bias, K, conv_state, p, silu, out);
  check_launch("conv1d");
  if (K > 1) {
    conv_state_kernel<<<dim3(p.num_seqs, cblocks), 256, 0, s>>>(in, ld_in, ch, K, conv_state, p);
    check_launch("conv1d state");
  }
}

}  // namespace parity::cuda
