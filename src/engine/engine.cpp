#include "engine/engine.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "engine/runner.h"
#include "engine/sampler.h"

namespace parity::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Length: return "length";
    case FinishReason::Stop: return "stop";
    case FinishReason::Forced: return "forced";
    case FinishReason::Aborted: return "aborted";
  }
  return "?";
}

class Engine::Slots : public SlotPool {
 public:
  explicit Slots(cache::ModelCache& c) : c_(c) {}
  int allocate() override { return c_.allocate(); }
  void release(int slot) override { c_.release(slot); }
  bool reserve(int slot, int64_t total_tokens) override { return c_.reserve(slot, total_tokens); }

 private:
  cache::ModelCache& c_;
};

Engine::Engine(const model::Model& model, EngineConfig cfg) : model_(model), cfg_(cfg) {
  numerics_ = cache::resolve_numerics(cfg_.mode == model::ScanMode::Exact, cfg_.ssm_cache_dtype, cfg_.exact_grid,
                                      cfg_.exact_stagger, model.chunk_size(), model.default_exact_cell());
  cache::MambaCacheOptions opt;
  opt.exact = numerics_.exact;
  opt.ssm_dtype = numerics_.ssm_dtype;
  opt.grid = numerics_.grid;
  if (cfg_.sched.max_num_batched_tokens < 1) throw Error("max_num_batched_tokens must be at least 1");
  plan_ = cache::plan_cache(model.cache_spec(), opt, cfg_.state_memory_budget, cfg_.sched.max_num_seqs,
                            cfg_.max_model_len, cfg_.kv_block_size);
  cache_ = std::make_unique<cache::ModelCache>(model.cache_spec(), plan_.options(opt));
  slots_ = std::make_unique<Slots>(*cache_);
  sched_ = std::make_unique<Scheduler>(cfg_.sched, *slots_);
}

Engine::~Engine() = default;

uint64_t Engine::add_request(RequestSpec spec) {
  const int V = model_.vocab_size();
  if (spec.prompt.empty()) throw Error("request rejected: the prompt is empty");
  auto check = [&](const std::vector<int32_t>& ids, const char* what) {
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= V)
        throw Error(std::string("request rejected: ") + what + " token id " + std::to_string(ids[i]) + " at index " +
                    std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
  };
  check(spec.prompt, "prompt");
  check(spec.forced, "forced");
  const int64_t cont = spec.forced.empty() ? spec.sampling.max_tokens : static_cast<int64_t>(spec.forced.size());
  if (spec.forced.empty() && spec.sampling.max_tokens < 1) throw Error("request rejected: max_tokens must be at least 1");
  const int64_t len = static_cast<int64_t>(spec.prompt.size()) + cont;
  if (len > cfg_.max_model_len)
    throw Error("request rejected: prompt + continuation is " + std::to_string(len) +
                " tokens, more than max_model_len " + std::to_string(cfg_.max_model_len));
  // The last sampled token is never fed; every forced token is (it yields the row after it).
  const int64_t fed = spec.forced.empty() ? len - 1 : len;
  if (const cache::KvCache* kv = cache_->kv(); kv && kv->blocks_for(fed) > kv->num_blocks())
    throw Error("request rejected: it feeds up to " + std::to_string(fed) + " tokens, but the whole KV cache holds " +
                std::to_string(plan_.kv_tokens()) + " (" + std::to_string(kv->num_blocks()) + " blocks of " +
                std::to_string(kv->layout().block_size) + "); raise --state-memory-mb");
  if (spec.sampling.temperature < 0 || spec.sampling.top_p <= 0 || spec.sampling.top_p > 1 || spec.sampling.top_k < 0)
    throw Error("request rejected: temperature must be >= 0, top_p in (0, 1], top_k >= 0");
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->tokens = spec.prompt;
  r->spec = std::move(spec);
  r->arrival = static_cast<int64_t>(r->id);
  Request* raw = r.get();
  if (listener_) listener_(raw->id, raw->spec);  // may throw (e.g. unknown reference prompt): nothing queued yet
  next_logit_pos_[raw->id] = raw->spec.return_prompt_logits ? 0 : raw->prompt_len() - 1;
  requests_[raw->id] = std::move(r);
  sched_->add(raw);
  return raw->id;
}

bool Engine::abort(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->status == RequestStatus::Finished) return false;
  sched_->finish(it->second.get());
  it->second->finish = FinishReason::Aborted;
  if (finish_listener_) finish_listener_(id, FinishReason::Aborted);
  return true;
}

bool Engine::preempt(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->status != RequestStatus::Running) return false;
  sched_->preempt(it->second.get());
  return true;
}

bool Engine::has_unfinished() const {
  return !sched_->running().empty() || !sched_->waiting().empty();
}

int Engine::num_preemptions(uint64_t id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second->num_preemptions;
}

std::vector<StepOutput> Engine::step() {
  ++step_;
  if (step_ == cfg_.preempt_at_step) {
    // Latest first, so the requeued requests keep their FCFS order at the head of the queue.
    std::vector<Request*> victims(sched_->running().rbegin(), sched_->running().rend());
    for (Request* r : victims) sched_->preempt(r);
  }
  std::vector<ScheduledChunk> chunks = sched_->schedule();
  if (chunks.empty()) return {};

  PackedPass pass = pack_pass(chunks, next_logit_pos_);
  const model::ForwardBatch& batch = pass.batch;
  const std::vector<PackedPass::RowUse>& uses = pass.uses;
  const int V = model_.vocab_size();
  std::vector<float> logits(batch.logit_rows.size() * static_cast<std::size_t>(V));
  model_.forward(batch, *cache_, cfg_.mode, logits.data(), hooks_);

  std::map<uint64_t, StepOutput> outs;
  for (const ScheduledChunk& c : chunks) c.req->num_computed += c.n;
  for (std::size_t u = 0; u < uses.size(); ++u) {
    Request* r = uses[u].req;
    const int64_t pos = uses[u].pos;
    const float* lrow = logits.data() + u * static_cast<std::size_t>(V);
    StepOutput& o = outs[r->id];
    o.id = r->id;
    const bool want_raw = r->spec.return_logits || r->spec.return_prompt_logits;
    if (want_raw && pos >= next_logit_pos_[r->id]) {
      o.logit_positions.push_back(pos);
      o.logit_rows.emplace_back(lrow, lrow + V);
      next_logit_pos_[r->id] = pos + 1;
    }
    if (pos != static_cast<int64_t>(r->tokens.size()) - 1) continue;
    // The row after the stream's last token: choose the next token.
    int32_t tok;
    if (!r->spec.forced.empty()) {
      if (r->num_generated == static_cast<int>(r->spec.forced.size())) {
        r->finish = FinishReason::Forced;
        continue;
      }
      tok = r->spec.forced[r->num_generated];
    } else {
      tok = sample_token(lrow, V, r->spec.sampling, r->num_generated);
    }
    if (r->spec.sampling.logprobs > 0) o.logprobs.push_back(top_logprobs(lrow, V, r->spec.sampling.logprobs, tok));
    r->tokens.push_back(tok);
    r->num_generated++;
    o.new_tokens.push_back(tok);
    if (r->spec.forced.empty()) {
      const auto& stops = r->spec.sampling.stop_token_ids;
      if (std::find(stops.begin(), stops.end(), tok) != stops.end()) r->finish = FinishReason::Stop;
      else if (r->num_generated >= r->spec.sampling.max_tokens) r->finish = FinishReason::Length;
    }
  }
  std::vector<StepOutput> result;
  for (auto& [id, o] : outs) {
    Request* r = requests_[id].get();
    if (r->finish != FinishReason::None) {
      o.finished = r->finish;
      sched_->finish(r);
      if (finish_listener_) finish_listener_(id, r->finish);
    }
    result.push_back(std::move(o));
  }
  return result;
}

void Engine::accumulate(std::map<uint64_t, RequestResult>& results, const std::vector<StepOutput>& outs) {
  for (const StepOutput& o : outs) {
    RequestResult& r = results[o.id];
    r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    r.logprobs.insert(r.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    r.logit_positions.insert(r.logit_positions.end(), o.logit_positions.begin(), o.logit_positions.end());
    r.logit_rows.insert(r.logit_rows.end(), o.logit_rows.begin(), o.logit_rows.end());
    if (o.finished != FinishReason::None) r.finish = o.finished;
  }
}

std::map<uint64_t, RequestResult> Engine::run_to_completion() {
  std::map<uint64_t, RequestResult> results;
  while (has_unfinished()) accumulate(results, step());
  for (auto& [id, r] : results) r.num_preemptions = requests_[id]->num_preemptions;
  return results;
}

}  // namespace parity::engine
