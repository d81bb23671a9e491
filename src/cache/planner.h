#pragma once
// Sizes the state cache from a memory budget: bytes one sequence needs (conv state, SSM state,
// replay rows) and how many sequences fit.
#include <cstddef>
#include <string>

#include "cache/mamba_state_cache.h"

namespace parity::cache {

struct CachePlan {
  SlotBytes per_seq;
  int num_slots = 0;
  std::size_t total_bytes() const { return per_seq.total() * static_cast<std::size_t>(num_slots); }
  std::string describe() const;  // one human-readable block, for stderr
};

// budget_bytes == 0: one slot per allowed sequence. Otherwise min(max_num_seqs, budget / per_seq);
// a budget below one sequence is an error that says how much one sequence needs.
CachePlan plan_cache(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt,
                     std::size_t budget_bytes, int max_num_seqs);

}  // namespace parity::cache
