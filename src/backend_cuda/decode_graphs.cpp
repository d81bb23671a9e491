#include "backend_cuda/decode_graphs.h"

#include "backend_cuda/pass_inputs.h"
#include "kernels_cuda/cuda_check.h"

namespace parity::backend_cuda {

int graph_bucket(int batch) {
  if (batch <= 0 || batch > kMaxGraphBatch) return 0;
  int b = 1;
  while (b < batch) b *= 2;
  return b;
}

bool is_pure_decode(const model::ForwardBatch& b) {
  if (b.seqs.empty()) return false;
  for (const model::SeqChunk& q : b.seqs)
    if (q.n != 1 || q.start <= 0) return false;
  return true;
}

bool any_probe_wanted(const model::ProbeHooks* hooks, const std::vector<std::string>& points) {
  if (!hooks) return false;
  for (const std::string& p : points)
    if (hooks->wants(p)) return true;
  return false;
}

PaddedDecode pad_decode(const model::ForwardBatch& b, int bucket, int scratch_slot) {
  PaddedDecode p;
  p.tokens = b.tokens;
  p.spans = seq_spans(b);
  // Position 1, not 0: a padding row is a decode row like the others (the same launch shapes),
  // and it never asks for its slot to be cleared.
  for (int s = static_cast<int>(b.seqs.size()); s < bucket; ++s) {
    p.spans.push_back({scratch_slot, 1, 1});
    p.tokens.push_back(0);
  }
  return p;
}

const cuda::GraphExec& DecodeGraphs::get(const GraphEpoch& epoch, const GraphKey& key, cudaStream_t s,
                                         const std::function<void()>& enqueue) {
  if (!(epoch == epoch_)) {
    graphs_.clear();  // their pointers are stale: another cache's state, or a regrown input buffer
    epoch_ = epoch;
  }
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second;
  cuda::GraphExec g = cuda::capture_graph(s, enqueue);
  ++stats_.captures;
  return graphs_.emplace(key, std::move(g)).first->second;
}

void copy_logit_rows(const float* dev, int V, const std::vector<int>& rows, float* host, cudaStream_t s) {
  const std::size_t row_bytes = static_cast<std::size_t>(V) * sizeof(float);
  for (std::size_t i = 0; i < rows.size();) {
    std::size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    cuda::cuda_check(cudaMemcpyAsync(host + i * V, dev + static_cast<std::size_t>(rows[i]) * V, (j - i) * row_bytes,
                                     cudaMemcpyDeviceToHost, s),
                     "logits to host");
    i = j;
  }
}

}  // namespace parity::backend_cuda
