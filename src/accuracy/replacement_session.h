#pragma once
// Tensor replacement wired to a model: the reference set checked against the model's probe
// points, the hooks that inject it, and the request listener that maps each request to its
// reference prompt (explicit binding through RequestSpec::reference_prompt, else longest prefix).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accuracy/replacement_hooks.h"
#include "accuracy/tensor_replacer.h"
#include "common/dtype.h"
#include "engine/engine.h"
#include "model/model.h"

namespace parity::accuracy {

struct ReplacementConfig {
  // The reference: in memory or a captures file, never both.
  std::optional<Captures> tensors;
  std::string tensors_path;
  // Prompt ids: in memory, a JSON file ([[ids], …], one list per prompt; [[[ids]]] also taken),
  // or, when neither is given, the captures' own p{i}/prompt_token_ids.
  std::optional<std::vector<std::vector<int32_t>>> prompt_token_ids;
  std::string prompt_token_ids_path;
  // Storage dtype of in-memory reference values per module (absent: F32). For a file, the
  // dtypes come from the file itself.
  std::map<std::string, DType> tensor_dtypes;
  MissingPosition on_missing_position = MissingPosition::Error;
  std::vector<std::string> modules;  // empty: every module the reference holds
  // Injecting BF16/F16 values into the fp32 live tensors is refused unless asked for: a
  // reference saved in a narrower dtype than the engine computes in is usually a mistake.
  bool allow_dtype_widening = false;
};

class ReplacementSession {
 public:
  // Resolves the config (files read here) and checks every module against the model: a name
  // that is no probe point, or a feature size that differs from the probe point's, is an error.
  ReplacementSession(ReplacementConfig cfg, const model::Model& model);

  TensorReplacer& replacer() { return *replacer_; }
  model::ProbeHooks& hooks() { return *hooks_; }
  // Sets the engine's probe hooks and request listeners to this session's.
  void attach(engine::Engine& e);
  // Only the request listeners (for a caller that chains the hooks itself).
  void listen(engine::Engine& e);
  // What the listener does: explicit binding when spec.reference_prompt >= 0, else prefix match.
  void on_request(uint64_t id, const engine::RequestSpec& spec);
  // What the finish listener does: the request's binding is released (a long-running engine
  // would otherwise keep one per request it ever served).
  void on_finish(uint64_t id) { replacer_->forget_request(id); }
  std::string describe() const;  // one line for stderr: modules, prompts, policy, counts

 private:
  std::unique_ptr<TensorReplacer> replacer_;
  std::unique_ptr<ReplacementHooks> hooks_;
};

}  // namespace parity::accuracy
