#pragma once
// A smaller model of the same vocabulary proposes the drafts: it keeps its own state per request
// (its own cache, plain mode: its rounding does not matter, only its guesses), catches up with the
// tokens the target accepted since the last step, and decodes `room` tokens greedily, every
// request of the step in the same passes. Before drafting it keeps a copy of what the drafts will
// change, so that when the target rejects some of them it goes back there instead of recomputing
// the stream.
#include <map>
#include <memory>

#include "cache/model_cache.h"
#include "engine/speculation/drafter.h"
#include "model/model.h"

namespace parity::engine {

class DraftModelDrafter : public Drafter {
 public:
  // max_seqs: requests drafted for at once (the target's max_num_seqs); max_len: longest stream.
  DraftModelDrafter(const model::Model& draft, int max_seqs, int64_t max_len);
  ~DraftModelDrafter() override;
  void propose(std::vector<DraftQuery>& queries) override;
  void forget(uint64_t request) override;
  const char* name() const override { return "draft"; }

 private:
  struct Seq {
    int slot = -1;
    std::vector<int32_t> fed;  // tokens whose effect is in the slot
    cache::MambaSlotImage undo;  // the state before the last drafts were fed
    int64_t undo_pos = -1;
  };
  // The request's state, taking a slot if it has none; when all are taken, the state of a request
  // not among `current` (one preempted or waiting) is dropped for it (it is recomputed if needed).
  Seq& seq_for(uint64_t request, const std::vector<DraftQuery>& current);
  void rewind(Seq& s, const std::vector<int32_t>& tokens);

  const model::Model& m_;
  std::unique_ptr<cache::ModelCache> cache_;
  std::map<uint64_t, Seq> seqs_;
  model::LogitsBuffer logits_;  // a draft pass's logits, reused (page-locked when the draft model is on a GPU)
};

}  // namespace parity::engine
