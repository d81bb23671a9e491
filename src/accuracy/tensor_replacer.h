#pragma once
// Seed 000's TensorReplacer: reference tensors flattened to one [positions, E] matrix per
// (prompt, module), indexed at run time by (request → prompt, absolute position).
//  - fill_row is the native path: the probe hooks call it for every row of a live tensor, so a
//    pass may mix prefill chunks and decodes of many requests.
//  - build_context is the seed's bucketed layout ([bucket, E] per module, zero padding), kept as
//    an adapter for callers that schedule the seed's way.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "accuracy/captures_file.h"
#include "accuracy/prompt_index.h"

namespace parity::accuracy {

// What to do when a request reaches a position the reference does not cover (the model ran past
// the captured tokens). The seed zero-fills silently; here that is opt-in.
enum class MissingPosition { Error, Zero };
MissingPosition missing_position_from_name(const std::string& s);  // "error" | "zero"
const char* missing_position_name(MissingPosition p);

struct ReplacementStats {
  uint64_t rows_replaced = 0;        // rows overwritten with reference values
  uint64_t rows_past_reference = 0;  // rows beyond the reference (zero-filled, or the error)
};

// module → [bucket, E]; padding rows are zero.
using ReplacementContext = std::map<std::string, Matrix>;

class TensorReplacer {
 public:
  // flat[i]: module → [positions, E] of prompt i; prompt_ids[i] may be empty (explicit binding
  // only). Every prompt must hold the same modules with the same feature sizes.
  TensorReplacer(std::vector<std::map<std::string, Matrix>> flat, std::vector<std::vector<int32_t>> prompt_ids,
                 MissingPosition policy = MissingPosition::Error);
  // Flattens step captures (seed 000's rule, accuracy::flatten); prompt ids come from the captures.
  static TensorReplacer from_captures(const Captures& c, MissingPosition policy = MissingPosition::Error);

  const std::vector<std::string>& modules() const { return modules_; }
  bool has_module(const std::string& m) const { return features_.count(m) != 0; }
  int64_t feature_size(const std::string& module) const;  // throws for an unknown module
  std::size_t num_prompts() const { return flat_.size(); }
  const Matrix& reference(int prompt, const std::string& module) const;
  // Keeps only these modules; throws naming a module the reference does not hold.
  void restrict_to(const std::vector<std::string>& modules);

  MissingPosition policy() const { return policy_; }
  void set_policy(MissingPosition p) { policy_ = p; }

  int register_request(uint64_t request, const std::vector<int32_t>& prompt_tokens) {
    return index_.register_request(request, prompt_tokens);
  }
  void bind_request(uint64_t request, int prompt) { index_.bind_request(request, prompt); }
  void forget_request(uint64_t request) { index_.forget_request(request); }
  int resolve(uint64_t request) const { return index_.resolve(request); }
  const PromptIndex& prompt_index() const { return index_; }

  // Whether the reference of `module` holds a row for (request, position).
  bool covers(const std::string& module, uint64_t request, int64_t position) const {
    return position >= 0 && position < reference(resolve(request), module).rows;
  }
  // Writes the reference row of `module` for (request, position) to dst (feature_size floats).
  void fill_row(const std::string& module, uint64_t request, int64_t position, float* dst);

  // Seed layout. Prefill: one request (req_ids[0]); slots follow `positions` until the first
  // position already seen in this pass, which starts the padding. Decode: slot s belongs to
  // request s / tokens_per_req; slots from len(req_ids) × tokens_per_req on are padding.
  ReplacementContext build_context(const std::vector<uint64_t>& req_ids, const std::vector<int64_t>& positions,
                                   bool is_prefill, int tokens_per_req = 1);
  // Zeros of the right shape for every module (for a warm-up pass that only needs shapes).
  ReplacementContext warmup_context(int num_tokens) const;

  const ReplacementStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  std::vector<std::map<std::string, Matrix>> flat_;
  std::vector<std::string> modules_;
  std::map<std::string, int64_t> features_;
  PromptIndex index_;
  MissingPosition policy_;
  ReplacementStats stats_;
};

}  // namespace parity::accuracy
