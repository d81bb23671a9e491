#pragma once
// Probe points: every named tensor a user may capture or replace passes through one call,
// named with Hugging Face module names (backbone.layers.3.mixer, lm_head, ...). With no hooks
// attached a probe costs one pointer test.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/forward_batch.h"

namespace parity::model {

// Who each row of a probed tensor belongs to: the runner's per-row (request, absolute position).
struct ProbeRows {
  const ForwardBatch* batch = nullptr;
  std::vector<int> seq;              // row → index into batch->seqs
  std::vector<int64_t> position;     // row → absolute position in its sequence
  uint64_t request(int row) const {  // 0 when the runner gave no request ids
    const auto& ids = batch->request_ids;
    return ids.empty() ? 0 : ids[static_cast<std::size_t>(seq[static_cast<std::size_t>(row)])];
  }
  // True for a row that holds a speculative draft token (it may be rejected after the pass).
  bool is_draft(int row) const {
    const auto& d = batch->draft_from;
    if (d.empty()) return false;
    const int64_t from = d[static_cast<std::size_t>(seq[static_cast<std::size_t>(row)])];
    return from >= 0 && position[static_cast<std::size_t>(row)] >= from;
  }
};

class ProbeHooks {
 public:
  virtual ~ProbeHooks() = default;
  // Asked once per point per pass; false keeps the fast path (e.g. the fused conv + SiLU).
  virtual bool wants(const std::string& name) const = 0;
  // The live fp32 tensor [rows, cols], row-major. A capture reads it; a replacement overwrites it
  // in place and the rest of the forward uses the new values.
  virtual void visit(const std::string& name, float* data, int rows, int cols, const ProbeRows& meta) = 0;
  // Seed 000's direct interception: a point whose computation can be skipped (the MoE router)
  // asks for a replacement first, and only when wants(name). Returning true means dst
  // [rows, cols] holds the tensor the model must use and this hook has already seen it: the model
  // computes nothing there and makes no visit() call for the point in this pass. False (the
  // default): the model computes the tensor and visits it as usual.
  virtual bool fetch_replacement(const std::string& name, float* dst, int rows, int cols, const ProbeRows& meta) {
    (void)name, (void)dst, (void)rows, (void)cols, (void)meta;
    return false;
  }

  // Prefix caching (docs/prefix-caching.md). May `request` start from cached prefix state, and
  // under which identity? std::nullopt (the default, right for hooks that must see every row): no,
  // and its states are not cached either. A value: states made under the same value are
  // interchangeable for this request; hooks that change tensors return one that names what they
  // inject (the replacement and the reference prompt the request is bound to).
  virtual std::optional<uint64_t> prefix_identity(uint64_t request) {
    (void)request;
    return std::nullopt;
  }
  // The request's positions [0, length) were restored from state computed for request `source`
  // (under the same identity): their rows will not be visited for `request`.
  virtual void on_prefix_reuse(uint64_t request, uint64_t source, int64_t length) {
    (void)request, (void)source, (void)length;
  }
  // Speculative decoding (docs/speculative-decoding.md): the rows of `request` at positions >=
  // `from` that the last pass visited held rejected draft tokens; they count for nothing (the
  // positions are fed again, with other tokens, in a later pass or never).
  virtual void on_rows_discarded(uint64_t request, int64_t from) { (void)request, (void)from; }
};

struct ProbePoint {
  std::string name;
  int cols = 0;          // feature size; rows = tokens in the pass
  std::string meaning;   // one line for `parity probes`
};

}  // namespace parity::model
