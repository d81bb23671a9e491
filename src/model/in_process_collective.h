#pragma once
// The collective of CPU ranks: worker threads of one process that share memory. Each call publishes
// the rank's pointer, meets the others at a barrier, copies, and meets them again before anyone may
// reuse its buffer. A rank that fails calls abort(): every rank waiting (or about to wait) at the
// barrier throws CollectiveAborted instead of waiting for a peer that will never come; reset() makes
// the collective usable again once every rank has returned.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "model/collective.h"

namespace parity::model {

class InProcessCollective : public Collective {
 public:
  explicit InProcessCollective(int ranks);
  int size() const override { return ranks_; }
  void all_gather(int rank, const float* mine, std::size_t n, float* out) override;
  void broadcast(int rank, float* data, std::size_t n) override;

  void abort();
  void reset();

 private:
  void wait();  // the barrier

  int ranks_;
  std::vector<const float*> published_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace parity::model
