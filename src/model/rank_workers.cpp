#include "model/rank_workers.h"

#include "model/collective.h"

namespace parity::model {

RankWorkers::RankWorkers(int ranks) : errors_(static_cast<std::size_t>(ranks)) {
  for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankWorkers::~RankWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankWorkers::run_one(int rank) {
  try {
    (*job_)(rank);
  } catch (...) {
    errors_[static_cast<std::size_t>(rank)] = std::current_exception();
    (*on_failure_)(rank);
  }
}

void RankWorkers::loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_one(rank);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_.notify_all();
  }
}

void RankWorkers::run(const std::function<void(int)>& job, const std::function<void(int)>& on_failure) {
  for (auto& e : errors_) e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    on_failure_ = &on_failure;
    pending_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  start_.notify_all();
  run_one(0);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }
  std::exception_ptr first, first_aborted;
  for (const std::exception_ptr& e : errors_) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CollectiveAborted&) {
      if (!first_aborted) first_aborted = e;
    } catch (...) {
      if (!first) first = e;
    }
  }
  if (first) std::rethrow_exception(first);
  if (first_aborted) std::rethrow_exception(first_aborted);
}

}  // namespace parity::model
