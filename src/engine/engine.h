#pragma once
// The serving loop: requests in, one packed pass per step, tokens out.
//   scheduler picks requests and token counts → runner packs tokens and metadata → model
//   forward over the batch with the cache slots → logits of the rows that need them →
//   sampler (or the forced continuation) → request state.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "cache/model_cache.h"
#include "cache/planner.h"
#include "cache/prefix_cache.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace parity::engine {

class Drafter;

// Speculative decoding (docs/speculative-decoding.md): a drafter proposes up to num_tokens tokens
// per request and step, the target verifies them in the same pass (num_tokens + 1 rows), and a
// draft is accepted when it equals the target's own draw there. In exact mode the output equals
// non-speculative generation, token for token and logit row for logit row.
enum class SpeculativeMethod { Ngram, DraftModel, Custom };
struct SpeculativeConfig {
  int num_tokens = 0;  // k; 0 = off
  SpeculativeMethod method = SpeculativeMethod::Ngram;
  int ngram_min = 1, ngram_max = 4;          // prompt lookup: n-gram sizes tried, longest first
  const model::Model* draft_model = nullptr;  // DraftModel: same vocabulary as the target
  Drafter* drafter = nullptr;                 // Custom: the caller's (engine/speculation/drafter.h), not owned
};

struct SpeculationStats {
  uint64_t verify_chunks = 0;  // request chunks that carried drafts
  uint64_t drafted = 0;        // draft tokens verified
  uint64_t accepted = 0;       // of them, accepted
  uint64_t rollbacks = 0;      // chunks whose rejected rows were undone
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
};

struct EngineConfig {
  SchedulerConfig sched;
  model::ScanMode mode = model::ScanMode::Plain;
  // Empty: bfloat16 in plain mode (vLLM's default), float32 in exact mode.
  std::optional<DType> ssm_cache_dtype;
  // Exact mode's grid cell (empty: the backend's default) and stagger (cache/numerics.h).
  std::optional<int> exact_grid;
  cache::StaggerChoice exact_stagger = cache::StaggerChoice::Auto;
  // Exact mode's scan products (kernels/exact_grid.h); the model refuses what its backend cannot form.
  kernels::ScanProducts scan_products = kernels::ScanProducts::float32;
  // bytes for the state and KV caches together; 0 = one slot per max_num_seqs and KV room for
  // min(max_model_len, cache::kDefaultKvTokensPerSeq) tokens per slot
  std::size_t state_memory_budget = 0;
  // > 0 (a model on a GPU, no state_memory_budget): the caches get the device memory that is
  // free now minus (1 - this) of the device's total, vLLM's --gpu-memory-utilization; the
  // remaining share is headroom for activations and other processes.
  double gpu_memory_utilization = 0;
  int kv_block_size = 16;
  int64_t max_model_len = 1 << 20;      // prompt + continuation limit per request
  int64_t preempt_at_step = -1;         // preempt every running request at this step (tests, --preempt-at-step)
  // Prefix caching (docs/prefix-caching.md): requests that share a token prefix reuse its state.
  // States are kept at multiples of prefix_block_tokens (a multiple of kv_block_size) of each
  // prompt; prefill chunks end on them. prefix_cache_bytes: the Mamba state images' share of the
  // memory (0: the planner's default, cache::PrefixCacheBudget).
  bool enable_prefix_caching = false;
  int prefix_block_tokens = 256;
  std::size_t prefix_cache_bytes = 0;
  SpeculativeConfig speculative;
};

// Everything a finished request produced, gathered from its step outputs.
struct RequestResult {
  std::vector<int32_t> tokens;  // generated or forced tokens
  std::vector<std::vector<TokenLogprob>> logprobs;
  std::vector<int64_t> logit_positions;
  std::vector<std::vector<float>> logit_rows;
  FinishReason finish = FinishReason::None;
  int num_preemptions = 0;
};

class Engine {
 public:
  Engine(const model::Model& model, EngineConfig cfg);
  ~Engine();

  // Validates and queues a request; throws parity::Error (naming the problem) for an empty
  // prompt, a token id outside the vocabulary, a request longer than max_model_len or one whose
  // KV blocks could never fit the whole KV cache. A rejected
  // request leaves the engine and the other requests untouched.
  uint64_t add_request(RequestSpec spec);
  std::vector<StepOutput> step();
  bool abort(uint64_t id);
  // Preempts one running request now (it recomputes later under the same id).
  bool preempt(uint64_t id);
  bool has_unfinished() const;
  int num_preemptions(uint64_t id) const;  // 0 for an unknown id

  // Accuracy tools. Hooks see every probe point of every pass (rows carry request ids and
  // absolute positions); the listener hears of each accepted request before it is scheduled, the
  // finish listener of each request that finished or was aborted, once, after its last pass
  // (not of a preemption: the request resumes under the same id).
  void set_probe_hooks(model::ProbeHooks* hooks) { hooks_ = hooks; }
  using RequestListener = std::function<void(uint64_t id, const RequestSpec& spec)>;
  void set_request_listener(RequestListener l) { listener_ = std::move(l); }
  using FinishListener = std::function<void(uint64_t id, FinishReason why)>;
  void set_finish_listener(FinishListener l) { finish_listener_ = std::move(l); }
  int64_t steps() const { return step_; }
  const cache::CachePlan& plan() const { return plan_; }
  const cache::ModelCache& cache() const { return *cache_; }
  const EngineConfig& config() const { return cfg_; }
  const cache::Numerics& numerics() const { return numerics_; }
  // Prefix caching: null when it is off.
  const cache::PrefixCache* prefix_cache() const { return prefix_.get(); }
  // Speculative decoding: what the drafts did (all zero when it is off).
  const SpeculationStats& speculation_stats() const { return spec_stats_; }

  // Steps until every request has finished, folding the step outputs per request.
  std::map<uint64_t, RequestResult> run_to_completion();
  static void accumulate(std::map<uint64_t, RequestResult>& results, const std::vector<StepOutput>& outs);

 private:
  class Slots;
  void propose_drafts(std::vector<ScheduledChunk>& chunks);
  // Turns one request's rows of the pass into tokens (sampled or forced), emitting raw logits.
  void take_rows(Request* r, const std::vector<std::pair<int64_t, const float*>>& rows, StepOutput& o);
  void finish_request(Request* r);
  std::unique_ptr<Drafter> owned_drafter_;
  Drafter* drafter_ = nullptr;
  SpeculationStats spec_stats_;
  std::vector<cache::MambaSlotImage> undo_;  // per chunk of the pass: the state before its drafts
  const model::Model& model_;
  EngineConfig cfg_;
  cache::Numerics numerics_;
  cache::CachePlan plan_;
  std::unique_ptr<cache::ModelCache> cache_;
  std::unique_ptr<cache::PrefixCache> prefix_;
  std::unique_ptr<Slots> slots_;
  std::unique_ptr<Scheduler> sched_;
  std::map<uint64_t, std::unique_ptr<Request>> requests_;
  std::map<uint64_t, int64_t> next_logit_pos_;  // first position whose raw logits are not yet emitted
  model::ProbeHooks* hooks_ = nullptr;
  RequestListener listener_;
  FinishListener finish_listener_;
  uint64_t next_id_ = 1;
  int64_t step_ = 0;
  model::LogitsBuffer logits_;  // the pass's logits (the model's host memory: page-locked on a GPU)
};

}  // namespace parity::engine
