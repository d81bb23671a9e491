#include "model/rank_checkpoint.h"

#include <cstring>
#include <memory>
#include <vector>

#include "common/aligned.h"
#include "common/error.h"

namespace parity::model {
namespace {

struct RankTensors {
  std::map<std::string, io::TensorView> views;
  std::vector<AlignedBuffer<uint8_t>> buffers;
};

io::TensorView cut(const io::TensorView& t, const TensorSplit& s, int rank, int tp, AlignedBuffer<uint8_t>& buf) {
  io::TensorView v = t;
  const std::size_t esize = dtype_size(t.dtype);
  buf.resize(t.nbytes);
  v.data = buf.data();
  if (s.rank_zero) {
    if (rank == 0) std::memcpy(buf.data(), t.data, t.nbytes);
    else std::memset(buf.data(), 0, t.nbytes);
    return v;
  }
  const std::size_t d = static_cast<std::size_t>(s.dim);
  if (d >= t.shape.size() || t.shape[d] != s.pieces.whole())
    throw Error("tensor parallelism: " + t.name + " does not have the width " + std::to_string(s.pieces.whole()) +
                " the model's shape gives in dimension " + std::to_string(s.dim));
  std::size_t outer = 1, inner = esize;
  for (std::size_t i = 0; i < d; ++i) outer *= static_cast<std::size_t>(t.shape[i]);
  for (std::size_t i = d + 1; i < t.shape.size(); ++i) inner *= static_cast<std::size_t>(t.shape[i]);
  const std::size_t whole = static_cast<std::size_t>(t.shape[d]), local = static_cast<std::size_t>(s.pieces.local(tp));
  v.shape[d] = static_cast<int64_t>(local);
  v.nbytes = outer * local * inner;
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (std::size_t o = 0; o < outer; ++o)
    s.pieces.for_each_piece(rank, tp, [&](int64_t at, int64_t to, int64_t w) {
      std::memcpy(buf.data() + (o * local + std::size_t(to)) * inner, src + (o * whole + std::size_t(at)) * inner,
                  std::size_t(w) * inner);
    });
  return v;
}

}  // namespace

Checkpoint rank_checkpoint(const Checkpoint& whole, const TensorSplits& splits, int rank, int tp) {
  auto tensors = std::make_shared<RankTensors>();
  tensors->buffers.reserve(splits.size());
  for (const auto& [name, split] : splits) {
    const io::TensorView* t = whole.find(name);
    if (!t) continue;
    tensors->buffers.emplace_back();
    tensors->views.emplace(name, cut(*t, split, rank, tp, tensors->buffers.back()));
  }
  Checkpoint ck;
  ck.origin = whole.origin;
  ck.config = whole.config;
  // The cut tensors live as long as this checkpoint (the loaders widen and pack them); the whole
  // checkpoint's storage lives with the model (its replicated embeddings are read in place).
  auto find_whole = whole.find;
  ck.find = [tensors, find_whole](const std::string& name) -> const io::TensorView* {
    auto it = tensors->views.find(name);
    return it != tensors->views.end() ? &it->second : find_whole(name);
  };
  ck.keepalive = whole.keepalive;
  return ck;
}

}  // namespace parity::model
