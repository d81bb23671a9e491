#include "model/rank_probe_hooks.h"

#include <string>

#include "common/error.h"

namespace parity::model {

RankProbeHooks::RankProbeHooks(ProbeHooks* user, const std::map<std::string, ColumnSplit>* sharded,
                               TensorParallelRank tp)
    : user_(user), sharded_(sharded), tp_(tp) {}

bool RankProbeHooks::agree(bool rank0_says) const {
  float v = rank0_says ? 1.0f : 0.0f;
  tp_.collective->broadcast(tp_.rank, &v, 1);
  return v != 0.0f;
}

bool RankProbeHooks::wants(const std::string& name) const {
  return agree(tp_.rank == 0 && user_->wants(name));
}

void RankProbeHooks::visit(const std::string& name, float* data, int rows, int cols, const ProbeRows& meta) {
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  auto it = sharded_->find(name);
  if (it == sharded_->end()) {
    if (tp_.rank == 0) user_->visit(name, data, rows, cols, meta);
    tp_.collective->broadcast(tp_.rank, data, n);  // a replacement reaches every rank
    return;
  }
  const ColumnSplit& split = it->second;
  const int tp = tp_.size, whole_cols = static_cast<int>(split.whole());
  if (cols != split.local(tp))
    throw Error("internal: probe point " + name + " has " + std::to_string(cols) + " columns on a rank, not " +
                std::to_string(split.local(tp)));
  const std::size_t whole_n = std::size_t(rows) * std::size_t(whole_cols);
  if (all_.size() < n * std::size_t(tp)) all_.resize(n * std::size_t(tp));
  if (whole_.size() < whole_n) whole_.resize(whole_n);
  tp_.collective->all_gather(tp_.rank, data, n, all_.data());
  if (tp_.rank == 0) {
    gather_columns(split, tp, all_.data(), rows, whole_.data());
    user_->visit(name, whole_.data(), rows, whole_cols, meta);
  }
  tp_.collective->broadcast(tp_.rank, whole_.data(), whole_n);
  take_columns(split, tp_.rank, tp, whole_.data(), rows, data);
}

bool RankProbeHooks::fetch_replacement(const std::string& name, float* dst, int rows, int cols,
                                       const ProbeRows& meta) {
  // Only replicated points intercept (the MoE router): rank 0's rows go to every rank.
  const bool got = agree(tp_.rank == 0 && user_->fetch_replacement(name, dst, rows, cols, meta));
  if (got) tp_.collective->broadcast(tp_.rank, dst, std::size_t(rows) * std::size_t(cols));
  return got;
}

}  // namespace parity::model
