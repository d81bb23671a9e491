#pragma once
// The probe hooks one tensor-parallel rank's model calls. The user's hooks see the model as one rank
// holding everything: the same names and whole-width tensors as a TP = 1 run.
//  - Only rank 0 asks the user's hooks anything, on the thread that called the forward (a hook may
//    keep per-thread state, as the seed's active replacement context does); the answer reaches the
//    other ranks through the collective, so every rank takes the same path.
//  - A sharded point (tp_plan.h) is gathered to its whole width before the hook sees it, and each rank
//    takes its columns back afterwards, so a replacement (unsharded, as a TP = 1 run or Hugging Face
//    writes it) reaches every rank as its slice: seed 000's rank slicing at the injection point.
//  - A replicated point holds the same bits on every rank: rank 0's tensor is visited and then copied
//    to the others.
#include <map>
#include <string>
#include <vector>

#include "common/aligned.h"
#include "model/collective.h"
#include "model/column_split.h"
#include "model/probe.h"

namespace parity::model {

class RankProbeHooks : public ProbeHooks {
 public:
  // user: the caller's hooks (read by rank 0 only); sharded: the plan's sharded points.
  RankProbeHooks(ProbeHooks* user, const std::map<std::string, ColumnSplit>* sharded, TensorParallelRank tp);

  bool wants(const std::string& name) const override;
  void visit(const std::string& name, float* data, int rows, int cols, const ProbeRows& meta) override;
  bool fetch_replacement(const std::string& name, float* dst, int rows, int cols, const ProbeRows& meta) override;

 private:
  bool agree(bool rank0_says) const;  // rank 0's answer on every rank

  ProbeHooks* user_;
  const std::map<std::string, ColumnSplit>* sharded_;
  TensorParallelRank tp_;
  AlignedBuffer<float> all_, whole_;
};

}  // namespace parity::model
