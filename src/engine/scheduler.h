#pragma once
// Continuous batching: FCFS, bounded by max_num_seqs sequences and max_num_batched_tokens tokens
// per pass. Running requests come first (each decode takes one token, an unfinished prefill
// takes what the budget leaves), then waiting requests are admitted while a state slot and
// budget remain. A prefill may be cut at any token (chunked prefill); decodes and prefill chunks
// share one pass. Every scheduled chunk first reserves KV room for its tokens; when that fails,
// the latest-arrived running request is preempted (as vLLM does) until it succeeds or the
// request itself was the victim, and no new request is admitted in that pass. Preemption frees a
// request's slot and blocks and sends it back to the head of the queue; it later recomputes its
// whole stream (prompt + tokens so far) under the same id. Running requests stay in arrival order.
// A running request with a speculative allowance asks for that many tokens more (its drafts).
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/request.h"

namespace parity::engine {

struct SchedulerConfig {
  int max_num_seqs = 8;
  int max_num_batched_tokens = 2048;
};

struct ScheduledChunk {
  Request* req;
  int n;  // tokens of this request in the pass, starting at req->num_computed
};

class SlotPool {
 public:
  virtual ~SlotPool() = default;
  virtual int allocate() = 0;  // -1 when none is free
  virtual void release(int slot) = 0;
  // Room for positions [0, total_tokens) of the slot; false when the memory is not there.
  virtual bool reserve(int /*slot*/, int64_t /*total_tokens*/) { return true; }
  // A request was just given r.slot (fresh): the tokens already computed there (a prefix-cache
  // hit), 0 otherwise.
  virtual int64_t restore_prefix(Request& /*r*/) { return 0; }
  // The request's next chunk may take n tokens from r.num_computed on: how many it takes (the
  // prefix cache cuts prefill chunks at its block boundaries).
  virtual int cut_chunk(const Request& /*r*/, int n) { return n; }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig cfg, SlotPool& slots) : cfg_(cfg), slots_(slots) {}

  void add(Request* r);
  // Picks the next pass. Empty when nothing can run.
  std::vector<ScheduledChunk> schedule();
  // Frees the slot and requeues the request at the front; its computed state is forgotten.
  void preempt(Request* r);
  void finish(Request* r);  // releases the slot and forgets the request
  const std::deque<Request*>& running() const { return running_; }
  const std::deque<Request*>& waiting() const { return waiting_; }

 private:
  void insert_running(Request* r);
  SchedulerConfig cfg_;
  SlotPool& slots_;
  std::deque<Request*> waiting_;
  std::deque<Request*> running_;
};

}  // namespace parity::engine
