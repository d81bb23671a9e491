#include "kernels_cuda/pass_plan.h"

#include <algorithm>

namespace parity::cuda {

PassPlan::PassPlan(const std::vector<SeqSpan>& seqs, const ScanGrid& grid, const std::vector<int32_t>& tokens,
                   const std::vector<int32_t>& extra_rows) {
  ints_ = tokens;
  num_seqs_ = static_cast<int>(seqs.size());
  o_rowseq_ = ints_.size();
  for (int s = 0; s < num_seqs_; ++s) ints_.insert(ints_.end(), static_cast<std::size_t>(seqs[s].n), s);
  num_rows_ = static_cast<int>(ints_.size() - o_rowseq_);
  one_row_each_ = std::all_of(seqs.begin(), seqs.end(), [](const SeqSpan& q) { return q.n == 1; });
  o_slot_ = ints_.size();
  for (const auto& q : seqs) ints_.push_back(q.slot);
  o_n_ = ints_.size();
  for (const auto& q : seqs) ints_.push_back(q.n);
  o_row0_ = ints_.size();
  int row = 0;
  for (const auto& q : seqs) {
    ints_.push_back(row);
    row += q.n;
    starts_.push_back(q.start);
  }
  o_tasks_ = ints_.size();
  std::vector<int32_t> task0;
  for (int s = 0; s < num_seqs_; ++s) {
    const SeqSpan& q = seqs[s];
    task0.push_back(num_tasks_);
    if (uses_ssu(grid, q.start, q.n)) {
      ++num_ssu_;
      continue;
    }
    if (uses_decode_row(grid, q.n)) {
      ++num_decode_;
      continue;
    }
    // Any head's cells over the call: the stagger (exact mode) can add one partial cell at the front,
    // and n rows touch at most n cells (a one-row call: one).
    const int k_max = std::min((q.n + grid.cell - 1) / grid.cell + (grid.exact ? 1 : 0), q.n);
    for (int k = 0; k < k_max; ++k, ++num_tasks_) {
      ints_.push_back(s);
      ints_.push_back(k);
    }
  }
  task0.push_back(num_tasks_);
  o_task0_ = ints_.size();
  ints_.insert(ints_.end(), task0.begin(), task0.end());
  o_extra_ = ints_.size();
  ints_.insert(ints_.end(), extra_rows.begin(), extra_rows.end());
  o_new_ = ints_.size();
  for (const auto& q : seqs)
    if (q.start == 0) ints_.push_back(q.slot);
  num_new_ = static_cast<int>(ints_.size() - o_new_);
}

PassSeqs PassPlan::upload(DeviceBuffer<int32_t>& ints, DeviceBuffer<int64_t>& starts) const {
  ints.upload(ints_);
  starts.upload(starts_);
  return view(ints.data(), starts.data());
}

PassSeqs PassPlan::upload(DeviceBuffer<int32_t>& ints, DeviceBuffer<int64_t>& starts, PinnedBuffer<int32_t>& h_ints,
                          PinnedBuffer<int64_t>& h_starts, cudaStream_t s) const {
  upload_async(ints_, h_ints, ints, s);
  upload_async(starts_, h_starts, starts, s);
  return view(ints.data(), starts.data());
}

PassSeqs PassPlan::view(const int32_t* d, const int64_t* starts) const {
  PassSeqs p;
  p.num_seqs = num_seqs_;
  p.num_rows = num_rows_;
  p.slot = d + o_slot_;
  p.start = starts;
  p.n = d + o_n_;
  p.row0 = d + o_row0_;
  p.row_seq = d + o_rowseq_;
  p.cell_task = d + o_tasks_;
  p.task0 = d + o_task0_;
  p.num_cell_tasks = num_tasks_;
  p.num_ssu_seqs = num_ssu_;
  p.num_decode_seqs = num_decode_;
  p.one_row_each = one_row_each_;
  return p;
}

}  // namespace parity::cuda
