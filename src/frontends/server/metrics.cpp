#include "frontends/server/metrics.h"

#include <sstream>

namespace parity::server {

namespace {
// Paths outside the API are counted under one label, so a scanner cannot grow the label set.
std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
                            "/tokenize", "/detokenize"})
    if (path == known) return path;
  return "other";
}
}  // namespace

void Metrics::count_request(const std::string& path, int status) {
  std::lock_guard<std::mutex> lk(m_);
  ++requests_[{endpoint_label(path), status}];
}

std::string Metrics::render(const LoopStats& s, int max_sequences) const {
  std::ostringstream o;
  o.precision(17);
  auto family = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  family("parity_http_requests_total", "counter", "HTTP requests answered, by endpoint and status");
  {
    std::lock_guard<std::mutex> lk(m_);
    for (const auto& [key, n] : requests_)
      o << "parity_http_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << '\n';
  }
  family("parity_prompt_tokens_total", "counter", "prompt tokens admitted into the engine");
  o << "parity_prompt_tokens_total " << s.prompt_tokens << '\n';
  family("parity_generation_tokens_total", "counter", "tokens generated");
  o << "parity_generation_tokens_total " << s.generation_tokens << '\n';
  family("parity_sequences_total", "counter", "sequences that left the engine, by outcome");
  o << "parity_sequences_total{outcome=\"finished\"} " << s.sequences_finished << '\n';
  o << "parity_sequences_total{outcome=\"aborted\"} " << s.sequences_aborted << '\n';
  o << "parity_sequences_total{outcome=\"rejected\"} " << s.sequences_rejected << '\n';
  family("parity_sequences_running", "gauge", "sequences holding a state slot");
  o << "parity_sequences_running " << s.sequences_running << '\n';
  family("parity_sequences_waiting", "gauge", "sequences admitted but waiting for a slot (queue depth)");
  o << "parity_sequences_waiting " << s.sequences_waiting << '\n';
  family("parity_sequences_limit", "gauge", "admission bound: running + waiting beyond this answers 503");
  o << "parity_sequences_limit " << max_sequences << '\n';
  family("parity_engine_step_seconds", "histogram", "wall time of one engine step (one packed pass)");
  for (std::size_t b = 0; b < LoopStats::kStepBuckets.size(); ++b)
    o << "parity_engine_step_seconds_bucket{le=\"" << LoopStats::kStepBuckets[b] << "\"} " << s.step_buckets[b] << '\n';
  o << "parity_engine_step_seconds_bucket{le=\"+Inf\"} " << s.steps << '\n';
  o << "parity_engine_step_seconds_sum " << s.step_seconds_sum << '\n';
  o << "parity_engine_step_seconds_count " << s.steps << '\n';
  family("parity_cache_slots", "gauge", "state cache slots (one per running sequence)");
  o << "parity_cache_slots " << s.slots_total << '\n';
  family("parity_cache_usage_ratio", "gauge", "fraction of state slots in use");
  o << "parity_cache_usage_ratio " << (s.slots_total ? double(s.sequences_running) / double(s.slots_total) : 0.0) << '\n';
  family("parity_kv_blocks", "gauge", "KV cache blocks (attention layers), by state");
  o << "parity_kv_blocks{state=\"free\"} " << s.kv_blocks_free << '\n';
  o << "parity_kv_blocks{state=\"used\"} " << (s.kv_blocks_total - s.kv_blocks_free) << '\n';
  if (s.prefix_caching) {
    family("parity_prefix_cache_queries_total", "counter", "admissions that looked up the prefix cache");
    o << "parity_prefix_cache_queries_total " << s.prefix_lookups << '\n';
    family("parity_prefix_cache_hits_total", "counter", "of them, those that reused a cached prefix");
    o << "parity_prefix_cache_hits_total " << s.prefix_hits << '\n';
    family("parity_prefix_cache_tokens_total", "counter", "prompt tokens that could be reused, and were");
    o << "parity_prefix_cache_tokens_total{kind=\"queried\"} " << s.prefix_lookup_tokens << '\n';
    o << "parity_prefix_cache_tokens_total{kind=\"hit\"} " << s.prefix_hit_tokens << '\n';
  }
  if (s.speculation) {
    family("parity_spec_decode_tokens_total", "counter", "speculative draft tokens verified, and accepted");
    o << "parity_spec_decode_tokens_total{kind=\"drafted\"} " << s.spec_drafted << '\n';
    o << "parity_spec_decode_tokens_total{kind=\"accepted\"} " << s.spec_accepted << '\n';
  }
  family("parity_healthy", "gauge", "1 while the engine runs normally");
  o << "parity_healthy " << (s.healthy ? 1 : 0) << '\n';
  return o.str();
}

}  // namespace parity::server
