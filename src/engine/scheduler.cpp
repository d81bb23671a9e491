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
  bool preempted = false;
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int64_t need = static_cast<int64_t>(r->tokens.size()) - r->num_computed + r->spec_allowance;
    if (need <= 0) {
      ++i;
      continue;
    }
    const int n = slots_.cut_chunk(*r, static_cast<int>(std::min<int64_t>(need, budget)));
    bool ok = slots_.reserve(r->slot, r->num_computed + n);
    // The victim is the last running request: behind r in arrival order, so not yet scheduled
    // in this pass, unless it is r itself.
    while (!ok) {
      Request* victim = running_.back();
      preempt(victim);
      preempted = true;
      if (victim == r) break;
      ok = slots_.reserve(r->slot, r->num_computed + n);
    }
    if (!ok) break;  // r was the last running request
    out.push_back({r, n});
    budget -= n;
    ++i;
  }
  while (!preempted && budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_num_seqs) {
    Request* r = waiting_.front();
    const int slot = slots_.allocate();
    if (slot < 0) break;  // FCFS: later arrivals do not overtake the head of the queue
    r->slot = slot;
    r->num_computed = slots_.restore_prefix(*r);
    const int n = slots_.cut_chunk(
        *r, static_cast<int>(std::min<int64_t>(static_cast<int64_t>(r->tokens.size()) - r->num_computed, budget)));
    if (!slots_.reserve(slot, r->num_computed + n)) {
      slots_.release(slot);
      r->slot = -1;
      r->num_computed = 0;
      break;
    }
    waiting_.pop_front();
    r->status = RequestStatus::Running;
    insert_running(r);
    out.push_back({r, n});
    budget -= n;
  }
  return out;
}

void Scheduler::insert_running(Request* r) {
  auto it = std::find_if(running_.begin(), running_.end(), [&](const Request* o) { return o->arrival > r->arrival; });
  running_.insert(it, r);
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
