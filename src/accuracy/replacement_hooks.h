#pragma once
// Probe hooks that overwrite live tensors with reference rows.
//  ReplacementHooks — the native path: each row's (request, absolute position) comes from the
//    runner's metadata, so any pass works (several prefill chunks and decodes together).
//  ContextHooks — the seed's path: rows come from the active context (set_active_context),
//    which the caller built with build_context for this pass's bucket.
// Both refuse a live tensor whose feature size differs from the reference's. Both serve the
// direct interception (fetch_replacement: the model asks before computing, e.g. the MoE router)
// with the same rows an in-place visit would write.
#include <map>
#include <string>
#include <utility>

#include "accuracy/tensor_replacer.h"
#include "model/probe.h"

namespace parity::accuracy {

// Prefix caching: requests bound to the same reference prompt of the same replacer inject the
// same rows at the same positions, so they share cached state (prefix_identity); requests bound
// to other prompts, or running without replacement, never do.
// Speculative decoding: a draft row past the reference is zero-filled and remembered; only if the
// draft is accepted (the row counts) does it get the treatment of on_missing_position (the error,
// or a counted zero row), as the same position would without speculation.
class ReplacementHooks : public model::ProbeHooks {
 public:
  explicit ReplacementHooks(TensorReplacer& replacer);
  std::optional<uint64_t> prefix_identity(uint64_t request) override;
  void on_rows_discarded(uint64_t request, int64_t from) override;
  bool wants(const std::string& name) const override { return r_.has_module(name); }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) override;
  bool fetch_replacement(const std::string& name, float* dst, int rows, int cols,
                         const model::ProbeRows& meta) override;

 private:
  TensorReplacer& r_;
  uint64_t identity_;
  std::map<uint64_t, std::pair<int64_t, std::string>> draft_past_;  // request → first such (position, module)
};

class ContextHooks : public model::ProbeHooks {
 public:
  bool wants(const std::string& name) const override;
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) override;
  bool fetch_replacement(const std::string& name, float* dst, int rows, int cols,
                         const model::ProbeRows& meta) override;
};

}  // namespace parity::accuracy
