#pragma once
// The worker threads of tensor-parallel CPU ranks: rank 0 runs on the caller's thread (so the
// caller's per-thread state, e.g. the seed's active replacement context, is where a hook expects it),
// ranks 1 … n-1 on threads that live as long as the model, so each keeps its scratch buffers
// (model/workspace.h) warm from one pass to the next. Each rank's kernels use their own OpenMP team of
// kernels::num_threads() threads.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace parity::model {

class RankWorkers {
 public:
  explicit RankWorkers(int ranks);
  ~RankWorkers();
  RankWorkers(const RankWorkers&) = delete;
  RankWorkers& operator=(const RankWorkers&) = delete;

  // Runs job(rank) for every rank at once and returns when all have. on_failure(rank) is called as soon
  // as a rank's job throws (to release ranks waiting for it); afterwards the exception of the lowest
  // rank whose job threw is rethrown, preferring one that is not a CollectiveAborted consequence.
  void run(const std::function<void(int)>& job, const std::function<void(int)>& on_failure);

 private:
  void loop(int rank);
  void run_one(int rank);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  const std::function<void(int)>* on_failure_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace parity::model
