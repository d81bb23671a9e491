#include "model/in_process_collective.h"

#include <cstring>

namespace parity::model {

InProcessCollective::InProcessCollective(int ranks) : ranks_(ranks), published_(static_cast<std::size_t>(ranks)) {}

void InProcessCollective::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw CollectiveAborted();
  const uint64_t gen = generation_;
  if (++arrived_ == ranks_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) throw CollectiveAborted();
}

void InProcessCollective::all_gather(int rank, const float* mine, std::size_t n, float* out) {
  published_[static_cast<std::size_t>(rank)] = mine;
  wait();  // every rank's pointer is published
  for (int r = 0; r < ranks_; ++r)
    if (n) std::memcpy(out + std::size_t(r) * n, published_[static_cast<std::size_t>(r)], n * sizeof(float));
  wait();  // nobody reads a peer's buffer any more: each may change its own again
}

void InProcessCollective::broadcast(int rank, float* data, std::size_t n) {
  if (rank == 0) published_[0] = data;
  wait();
  if (rank != 0 && n) std::memcpy(data, published_[0], n * sizeof(float));
  wait();
}

void InProcessCollective::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void InProcessCollective::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  arrived_ = 0;
}

}  // namespace parity::model
