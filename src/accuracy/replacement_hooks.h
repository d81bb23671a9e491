#pragma once
// Probe hooks that overwrite live tensors with reference rows.
//  ReplacementHooks — the native path: each row's (request, absolute position) comes from the
//    runner's metadata, so any pass works (several prefill chunks and decodes together).
//  ContextHooks — the seed's path: rows come from the active context (set_active_context),
//    which the caller built with build_context for this pass's bucket.
// Both refuse a live tensor whose feature size differs from the reference's. Both serve the
// direct interception (fetch_replacement: the model asks before computing, e.g. the MoE router)
// with the same rows an in-place visit would write.
#include <string>

#include "accuracy/tensor_replacer.h"
#include "model/probe.h"

namespace parity::accuracy {

class ReplacementHooks : public model::ProbeHooks {
 public:
  explicit ReplacementHooks(TensorReplacer& replacer) : r_(replacer) {}
  bool wants(const std::string& name) const override { return r_.has_module(name); }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) override;
  bool fetch_replacement(const std::string& name, float* dst, int rows, int cols,
                         const model::ProbeRows& meta) override;

 private:
  TensorReplacer& r_;
};

class ContextHooks : public model::ProbeHooks {
 public:
  bool wants(const std::string& name) const override;
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) override;
  bool fetch_replacement(const std::string& name, float* dst, int rows, int cols,
                         const model::ProbeRows& meta) override;
};

}  // namespace parity::accuracy
