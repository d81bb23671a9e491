#pragma once
// The options of every frontend that runs the engine (the CLI's --max-num-batched-tokens,
// --max-num-seqs, --max-model-len, --state-memory-mb, --gpu-memory-utilization, --preempt-at-step, --threads,
// --additional-config and --moe-routing, with the device, numerics and serving options; the Python
// module's keyword arguments of the same names), and the one way they become a loaded model, an
// engine configuration and an engine with its tensor replacement attached. A command that does not
// offer an option leaves its default, which is engine::EngineConfig's.
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accuracy/replacement_session.h"
#include "engine/engine.h"
#include "frontends/common/device_options.h"
#include "frontends/common/numerics_options.h"
#include "frontends/common/serving_options.h"
#include "model/model.h"
#include "model/model_options.h"

namespace parity::frontends {

struct EngineOptions {
  DeviceOptions device;
  NumericsOptions numerics;
  ServingOptions serving;
  std::string additional_config;  // JSON text, as --additional-config; empty: none
  std::string moe_routing = "direct";
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 8;
  int64_t max_model_len = 1 << 20;
  double state_memory_mb = 0;  // 0: one slot per sequence (the engine's default plan)
  double gpu_memory_utilization = 0;  // > 0: the caches get this share of a GPU (EngineConfig's)
  int64_t preempt_at_step = -1;
  int threads = 0;  // 0: leave the process's setting (all cores unless set before)

  // What can be checked before the (possibly slow) model load: numerics, serving, the MoE routing
  // and the additional config, which comes back parsed (an empty object when there is none).
  nlohmann::json check() const;
  model::ModelOptions model_options() const;
  // Sets the worker threads (when given), then loads MODEL on the device with the MoE routing.
  std::unique_ptr<model::Model> load(const std::string& spec) const;
  // Numerics, scheduler and cache limits, preemption, serving features; draft: the loaded draft
  // model (or null).
  engine::EngineConfig config(const model::Model* draft = nullptr) const;
};

// An engine as generate and serve run it. Members are destroyed in reverse: the replacement, then
// the engine, then the models it runs.
struct EngineSession {
  std::unique_ptr<model::Model> model, draft;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<accuracy::ReplacementSession> replacement;  // attached to engine; null without one
};

// Loads the model (and the draft model), builds the engine and attaches the additional config's
// replacement. additional: check()'s result.
EngineSession open_engine(const std::string& spec, const EngineOptions& o, const nlohmann::json& additional);

}  // namespace parity::frontends
