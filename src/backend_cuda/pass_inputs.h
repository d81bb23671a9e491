#pragma once
// A pass's metadata on its way to the device (kernels_cuda/pass_plan.h: tokens, each row's sequence, slots,
// positions, cell tasks, logit rows), as both CUDA models upload it: device buffers and their pinned
// staging, reused pass after pass (a model keeps one set for eager passes and one whose addresses its
// CUDA graphs freeze).
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pass_plan.h"
#include "kernels_cuda/pinned_buffer.h"
#include "model/forward_batch.h"

namespace parity::backend_cuda {

// The batch's sequences as the plans take them (PassPlan, AttnPlan).
std::vector<cuda::SeqSpan> seq_spans(const model::ForwardBatch& b);

struct PassInputs {
  cuda::DeviceBuffer<int32_t> ints;  // the plan's ints: its offsets (tokens_offset, ...) index them
  cuda::DeviceBuffer<int64_t> starts;
  cuda::PinnedBuffer<int32_t> h_ints;
  cuda::PinnedBuffer<int64_t> h_starts;

  // The plan, queued on s through the pinned staging (no host wait): the kernels' view of it.
  cuda::PassSeqs upload(const cuda::PassPlan& plan, cudaStream_t s) {
    return plan.upload(ints, starts, h_ints, h_starts, s);
  }
  // Room for every pure decode pass of up to `bucket` sequences (6·bucket + 1 ints and a position per
  // sequence; 16·bucket ints leave a margin), so that the addresses a CUDA graph froze hold while its
  // bucket does.
  void reserve_decode(int bucket) {
    ints.resize(16 * static_cast<std::size_t>(bucket));
    starts.resize(static_cast<std::size_t>(bucket));
  }
};

}  // namespace parity::backend_cuda
