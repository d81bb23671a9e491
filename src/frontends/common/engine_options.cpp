#include "frontends/common/engine_options.h"

#include "accuracy/additional_config.h"
#include "kernels/isa.h"

namespace parity::frontends {

nlohmann::json EngineOptions::check() const {
  numerics.check();
  serving.check();
  model::moe_routing_from_name(moe_routing);
  nlohmann::json additional =
      additional_config.empty() ? nlohmann::json::object() : accuracy::parse_additional_config(additional_config);
  accuracy::replacement_config_from_json(additional);
  return additional;
}

model::ModelOptions EngineOptions::model_options() const {
  model::ModelOptions o;
  o.moe_routing = model::moe_routing_from_name(moe_routing);
  return o;
}

std::unique_ptr<model::Model> EngineOptions::load(const std::string& spec) const {
  if (threads > 0) kernels::set_num_threads(threads);
  return device.load(spec, model_options());
}

engine::EngineConfig EngineOptions::config(const model::Model* draft) const {
  engine::EngineConfig cfg;
  numerics.apply(cfg);
  cfg.sched.max_num_batched_tokens = max_num_batched_tokens;
  cfg.sched.max_num_seqs = max_num_seqs;
  cfg.max_model_len = max_model_len;
  cfg.preempt_at_step = preempt_at_step;
  cfg.state_memory_budget = static_cast<std::size_t>(state_memory_mb * 1024.0 * 1024.0);
  cfg.gpu_memory_utilization = gpu_memory_utilization;
  serving.apply(cfg, draft);
  return cfg;
}

EngineSession open_engine(const std::string& spec, const EngineOptions& o, const nlohmann::json& additional) {
  EngineSession s;
  s.model = o.load(spec);
  s.draft = o.serving.load_draft();
  s.engine = std::make_unique<engine::Engine>(*s.model, o.config(s.draft.get()));
  s.replacement = accuracy::make_replacement_from_additional_config(additional, *s.model);
  if (s.replacement) s.replacement->attach(*s.engine);
  return s;
}

}  // namespace parity::frontends
