#include "engine/scheduler.h"

#include <algorithm>

namespace parity::engine {

void Scheduler::add(Request* r) {
  r->status = RequestStatus::Waiting;
  waiting_.push_back(r);
}

std::vector<ScheduledChunk> Scheduler::schedule() {
  std::vector<ScheduledChunk> out;
  int budget = cfg_.max_num_batched_tokens;
  for (Request* r : running_) {
    if (budget == 0) break;
    const int64_t need = static_cast<int64_t>(r->tokens.size()) - r->num_computed;
    if (need <= 0) continue;
    const int n = static_cast<int>(std::min<int64_t>(need, budget));
    out.push_back({r, n});
    budget -= n;
  }
  while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_num_seqs) {
    Request* r = waiting_.front();
    const int slot = slots_.allocate();
    if (slot < 0) break;  // FCFS: later arrivals do not overtake the head of the queue
    waiting_.pop_front();
    r->slot = slot;
    r->num_computed = 0;
    r->status = RequestStatus::Running;
    running_.push_back(r);
    const int n = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(r->tokens.size()), budget));
    out.push_back({r, n});
    budget -= n;
  }
  return out;
}

void Scheduler::preempt(Request* r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  if (it == running_.end()) return;
  running_.erase(it);
  slots_.release(r->slot);
  r->slot = -1;
  r->num_computed = 0;
  r->num_preemptions++;
  r->status = RequestStatus::Waiting;
  waiting_.push_front(r);
}

void Scheduler::finish(Request* r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  if (it != running_.end()) {
    running_.erase(it);
    slots_.release(r->slot);
    r->slot = -1;
  } else {
    auto w = std::find(waiting_.begin(), waiting_.end(), r);
    if (w != waiting_.end()) waiting_.erase(w);
  }
  r->status = RequestStatus::Finished;
}

}  // namespace parity::engine
