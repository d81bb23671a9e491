#include "engine/speculation/draft_model_drafter.h"

#include <algorithm>

#include "cache/planner.h"
#include "common/error.h"
#include "engine/sampler.h"

namespace parity::engine {

DraftModelDrafter::DraftModelDrafter(const model::Model& draft, int max_seqs, int64_t max_len) : m_(draft) {
  cache::MambaCacheOptions opt;  // plain mode, fp32 state: the draft's bits do not matter
  opt.ssm_dtype = DType::F32;
  const cache::CachePlan plan = cache::plan_cache(draft.cache_spec(), opt, 0, max_seqs, max_len);
  cache_ = std::make_unique<cache::ModelCache>(draft.cache_spec(), plan.options(opt));
}

DraftModelDrafter::~DraftModelDrafter() = default;

DraftModelDrafter::Seq& DraftModelDrafter::seq_for(uint64_t request, const std::vector<DraftQuery>& current) {
  Seq& s = seqs_[request];
  if (s.slot >= 0) return s;
  s.slot = cache_->allocate();
  for (auto it = seqs_.begin(); s.slot < 0 && it != seqs_.end(); ++it) {
    const bool in_use = std::any_of(current.begin(), current.end(),
                                    [&](const DraftQuery& q) { return q.request == it->first; });
    if (in_use || it->second.slot < 0) continue;
    cache_->release(it->second.slot);
    it->second = Seq{};
    s.slot = cache_->allocate();
  }
  if (s.slot < 0) throw Error("internal: the draft model has no free slot (more queries than max_num_seqs)");
  return s;
}

// Makes the slot hold a prefix of `tokens`: the longest one it can reach without recomputing.
void DraftModelDrafter::rewind(Seq& s, const std::vector<int32_t>& tokens) {
  std::size_t common = 0;
  while (common < s.fed.size() && common < tokens.size() && s.fed[common] == tokens[common]) ++common;
  if (common == s.fed.size()) return;
  if (s.undo_pos >= 0 && static_cast<std::size_t>(s.undo_pos) <= common) {
    cache_->load_state(s.slot, s.undo);
    if (cache::KvCache* kv = cache_->kv()) kv->truncate(s.slot, s.undo_pos);
    s.fed.resize(static_cast<std::size_t>(s.undo_pos));
  } else {  // nothing to go back to: start over
    cache_->release(s.slot);
    s.slot = cache_->allocate();
    s.fed.clear();
  }
  s.undo_pos = -1;
}

void DraftModelDrafter::propose(std::vector<DraftQuery>& queries) {
  const int V = m_.vocab_size();
  SamplingParams greedy;
  // Catch-up pass: every query's tokens not yet fed; its last row gives the first draft.
  std::vector<DraftQuery*> live;
  model::ForwardBatch b;
  for (DraftQuery& q : queries) {
    q.drafts.clear();
    if (q.room < 1) continue;
    Seq& s = seq_for(q.request, queries);
    rewind(s, *q.tokens);
    s.undo_pos = -1;  // a way back is only good for the drafts fed below
    const int64_t start = static_cast<int64_t>(s.fed.size()), T = static_cast<int64_t>(q.tokens->size());
    if (start >= T) continue;  // cannot happen: the newest token is never fed yet
    if (!cache_->reserve(s.slot, T + q.room)) throw Error("internal: the draft model's KV cache is full");
    b.seqs.push_back({s.slot, start, static_cast<int>(T - start)});
    b.tokens.insert(b.tokens.end(), q.tokens->begin() + start, q.tokens->end());
    b.logit_rows.push_back(static_cast<int>(b.tokens.size()) - 1);
    s.fed.assign(q.tokens->begin(), q.tokens->end());
    live.push_back(&q);
  }
  while (!b.seqs.empty()) {
    float* logits = logits_.rows(m_, b.logit_rows.size());
    m_.forward(b, *cache_, model::ScanMode::Plain, logits);
    // Next pass: each live query feeds the draft it just got, unless it has enough.
    model::ForwardBatch next;
    std::vector<DraftQuery*> still;
    for (std::size_t i = 0; i < live.size(); ++i) {
      DraftQuery& q = *live[i];
      Seq& s = seqs_[q.request];
      const int32_t d = sample_token(logits + i * static_cast<std::size_t>(V), V, greedy, 0);
      q.drafts.push_back(d);
      if (static_cast<int>(q.drafts.size()) >= q.room) continue;
      if (q.drafts.size() == 1) {  // the drafts fed from here on may be rejected: keep the way back
        cache_->save_for_call(s.slot, static_cast<int64_t>(s.fed.size()),
                              static_cast<int64_t>(s.fed.size()) + q.room - 1, s.undo);
        s.undo_pos = static_cast<int64_t>(s.fed.size());
      }
      next.seqs.push_back({s.slot, static_cast<int64_t>(s.fed.size()), 1});
      next.tokens.push_back(d);
      next.logit_rows.push_back(static_cast<int>(next.tokens.size()) - 1);
      s.fed.push_back(d);
      still.push_back(&q);
    }
    b = std::move(next);
    live = std::move(still);
  }
}

void DraftModelDrafter::forget(uint64_t request) {
  auto it = seqs_.find(request);
  if (it == seqs_.end()) return;
  if (it->second.slot >= 0) cache_->release(it->second.slot);
  seqs_.erase(it);
}

}  // namespace parity::engine
