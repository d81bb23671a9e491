#include "backend_cuda/pass_inputs.h"

namespace parity::backend_cuda {

std::vector<cuda::SeqSpan> seq_spans(const model::ForwardBatch& b) {
  std::vector<cuda::SeqSpan> spans;
  spans.reserve(b.seqs.size());
  for (const model::SeqChunk& q : b.seqs) spans.push_back({q.slot, q.start, q.n});
  return spans;
}

}  // namespace parity::backend_cuda
