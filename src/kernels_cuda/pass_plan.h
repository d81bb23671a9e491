#pragma once
// The host side of a pass's metadata: which rows belong to which sequence, and the (sequence, k)
// cell tasks of the SSD kernels, packed into one int32 and one int64 upload.
#include <cstdint>
#include <vector>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pinned_buffer.h"

namespace parity::cuda {

struct SeqSpan {
  int slot = 0;
  int64_t start = 0;
  int n = 0;
};

class PassPlan {
 public:
  // tokens may be empty (kernel tests); extra_rows are appended (e.g. logit rows) and new_slots
  // lists the slots of sequences starting at position 0.
  PassPlan(const std::vector<SeqSpan>& seqs, const ScanGrid& grid, const std::vector<int32_t>& tokens = {},
           const std::vector<int32_t>& extra_rows = {});
  // Uploads into the two buffers and returns the kernels' view of them.
  PassSeqs upload(DeviceBuffer<int32_t>& ints, DeviceBuffer<int64_t>& starts) const;
  // The same, queued on s through pinned staging (the models' path: no host wait).
  PassSeqs upload(DeviceBuffer<int32_t>& ints, DeviceBuffer<int64_t>& starts, PinnedBuffer<int32_t>& h_ints,
                  PinnedBuffer<int64_t>& h_starts, cudaStream_t s) const;

  // The kernels' view over the plan's host copy (tests: the cell tasks' arithmetic run on the CPU).
  PassSeqs host_view() const { return view(ints_.data(), starts_.data()); }

  std::size_t tokens_offset() const { return 0; }
  std::size_t extra_offset() const { return o_extra_; }
  std::size_t new_slots_offset() const { return o_new_; }
  int num_new_slots() const { return num_new_; }

 private:
  PassSeqs view(const int32_t* ints, const int64_t* starts) const;

  std::vector<int32_t> ints_;
  std::vector<int64_t> starts_;
  std::size_t o_rowseq_ = 0, o_slot_ = 0, o_n_ = 0, o_row0_ = 0, o_tasks_ = 0, o_task0_ = 0, o_extra_ = 0, o_new_ = 0;
  int num_seqs_ = 0, num_rows_ = 0, num_tasks_ = 0, num_new_ = 0, num_ssu_ = 0, num_decode_ = 0;
  bool one_row_each_ = false;
};

}  // namespace parity::cuda
