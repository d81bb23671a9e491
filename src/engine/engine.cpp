#include "engine/engine.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "engine/memory_budget.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/speculation/draft_model_drafter.h"
#include "engine/speculation/ngram_drafter.h"

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
  explicit Slots(Engine& e) : e_(e), c_(*e.cache_) {}
  int allocate() override { return c_.allocate(); }
  void release(int slot) override { c_.release(slot); }
  bool reserve(int slot, int64_t total_tokens) override {
    if (c_.reserve(slot, total_tokens)) return true;
    // Cached prefixes give their KV blocks back before anyone is preempted.
    cache::KvCache* kv = c_.kv();
    if (!e_.prefix_ || !kv) return false;
    const int need = kv->blocks_for(total_tokens) - static_cast<int>(kv->capacity(slot) / kv->layout().block_size);
    return e_.prefix_->evict_for_kv(need) && c_.reserve(slot, total_tokens);
  }
  int64_t restore_prefix(Request& r) override {
    if (!e_.prefix_ || !r.prefix_identity) return 0;
    // At least the last token is computed (its row chooses the next token), and no row the
    // request still wants raw logits of is skipped.
    const int64_t max_len = std::min<int64_t>(static_cast<int64_t>(r.tokens.size()) - 1, e_.next_logit_pos_[r.id]);
    const cache::PrefixHit hit = e_.prefix_->acquire(r.slot, r.tokens, max_len, *r.prefix_identity);
    if (hit.length > 0 && e_.hooks_) e_.hooks_->on_prefix_reuse(r.id, hit.source, hit.length);
    return hit.length;
  }
  int cut_chunk(const Request& r, int n) override {
    if (!e_.prefix_ || !r.prefix_identity) return n;
    // End the chunk on the first block boundary of the prompt inside it, so that the state there
    // can be cached after the pass.
    const int64_t B = e_.prefix_->block_tokens();
    const int64_t next = (r.num_computed / B + 1) * B;
    if (next <= r.prompt_len() && next < r.num_computed + n) return static_cast<int>(next - r.num_computed);
    return n;
  }

 private:
  Engine& e_;
  cache::ModelCache& c_;
};

Engine::Engine(const model::Model& model, EngineConfig cfg) : model_(model), cfg_(cfg) {
  numerics_ = model::stamp_backend(
      model, cache::resolve_numerics(cfg_.mode == model::ScanMode::Exact, cfg_.ssm_cache_dtype, cfg_.exact_grid,
                                     cfg_.exact_stagger, model.chunk_size(), model.default_exact_cell(),
                                     cfg_.scan_products));
  cache::MambaCacheOptions opt;
  opt.exact = numerics_.exact;
  opt.ssm_dtype = numerics_.ssm_dtype;
  opt.grid = numerics_.grid;
  if (cfg_.sched.max_num_batched_tokens < 1) throw Error("max_num_batched_tokens must be at least 1");
  const std::size_t budget = cache_budget(model, cfg_.state_memory_budget, cfg_.gpu_memory_utilization);
  plan_ = cache::plan_cache(model.cache_spec(), opt, budget, cfg_.sched.max_num_seqs,
                            cfg_.max_model_len, cfg_.kv_block_size,
                            {cfg_.enable_prefix_caching, cfg_.prefix_cache_bytes});
  cache_ = std::make_unique<cache::ModelCache>(model.cache_spec(), plan_.options(opt));
  if (cfg_.enable_prefix_caching)
    prefix_ = std::make_unique<cache::PrefixCache>(*cache_, numerics_, plan_.prefix_cache_bytes,
                                                   cfg_.prefix_block_tokens);
  slots_ = std::make_unique<Slots>(*this);
  const SpeculativeConfig& sp = cfg_.speculative;
  if ((cfg_.enable_prefix_caching || sp.num_tokens > 0) && model.cache_spec().state_on_device &&
      model.cache_spec().num_mamba_layers > 0)
    throw Error("prefix caching and speculative decoding are not supported yet for " + model.origin() +
                " on a device that keeps the Mamba state (they copy the state on the host)");
  if (sp.num_tokens < 0 || sp.num_tokens > 64)
    throw Error("speculative decoding: the number of draft tokens must be between 0 and 64 (got " +
                std::to_string(sp.num_tokens) + ")");
  if (sp.num_tokens > 0 && sp.method == SpeculativeMethod::Ngram) {
    owned_drafter_ = std::make_unique<NgramDrafter>(sp.ngram_min, sp.ngram_max);
  } else if (sp.num_tokens > 0 && sp.method == SpeculativeMethod::Custom) {
    if (!sp.drafter) throw Error("speculative decoding: the custom method needs a drafter");
    drafter_ = sp.drafter;
  } else if (sp.num_tokens > 0) {
    if (!sp.draft_model) throw Error("speculative decoding: the draft method needs a draft model (--draft-model)");
    if (sp.draft_model->vocab_size() != model.vocab_size())
      throw Error("speculative decoding: the draft model " + sp.draft_model->origin() + " has a vocabulary of " +
                  std::to_string(sp.draft_model->vocab_size()) + " tokens, the target " + model.origin() + " of " +
                  std::to_string(model.vocab_size()));
    owned_drafter_ = std::make_unique<DraftModelDrafter>(*sp.draft_model, cfg_.sched.max_num_seqs, cfg_.max_model_len);
  }
  if (owned_drafter_) drafter_ = owned_drafter_.get();
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
  // The probe hooks say whether (and as what) the request may share cached state; without hooks
  // every request shares under one identity.
  if (prefix_) raw->prefix_identity = hooks_ ? hooks_->prefix_identity(raw->id) : std::optional<uint64_t>(0);
  next_logit_pos_[raw->id] = raw->spec.return_prompt_logits ? 0 : raw->prompt_len() - 1;
  requests_[raw->id] = std::move(r);
  sched_->add(raw);
  return raw->id;
}

bool Engine::abort(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->status == RequestStatus::Finished) return false;
  it->second->finish = FinishReason::Aborted;
  finish_request(it->second.get());
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
  if (drafter_) {
    // Room for drafts: sampled requests past their prompt, never beyond the tokens they may still
    // feed (the last generated token is never fed, so a draft there could not be kept).
    for (Request* r : sched_->running()) {
      const int left = r->spec.sampling.max_tokens - r->num_generated - 1;
      const bool eligible = r->spec.forced.empty() && r->num_generated >= 1;
      r->spec_allowance = eligible ? std::max(0, std::min(cfg_.speculative.num_tokens, left)) : 0;
    }
  }
  std::vector<ScheduledChunk> chunks = sched_->schedule();
  if (chunks.empty()) return {};
  if (drafter_) propose_drafts(chunks);
  // The way back for every chunk that carries drafts: what its call can change.
  undo_.resize(std::max(undo_.size(), chunks.size()));
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const Request* r = chunks[i].req;
    if (!r->drafts.empty()) cache_->save_for_call(r->slot, r->num_computed, r->num_computed + chunks[i].n, undo_[i]);
  }

  PackedPass pass = pack_pass(chunks, next_logit_pos_);
  const model::ForwardBatch& batch = pass.batch;
  const std::vector<PackedPass::RowUse>& uses = pass.uses;
  const int V = model_.vocab_size();
  float* logits = logits_.rows(model_, batch.logit_rows.size());
  model_.forward(batch, *cache_, cfg_.mode, logits, hooks_);

  // Each request's rows, in position order (the runner packs a chunk's rows in order).
  std::map<const Request*, std::vector<std::pair<int64_t, const float*>>> rows;
  for (std::size_t u = 0; u < uses.size(); ++u)
    rows[uses[u].req].push_back({uses[u].pos, logits + u * static_cast<std::size_t>(V)});

  std::map<uint64_t, StepOutput> outs;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    Request* r = chunks[i].req;
    const int64_t n0 = r->num_computed, end = n0 + chunks[i].n;
    const int64_t stream = static_cast<int64_t>(r->tokens.size());  // before this pass's tokens
    auto it = rows.find(r);
    if (it != rows.end()) {
      StepOutput& o = outs[r->id];
      o.id = r->id;
      take_rows(r, it->second, o);
    }
    if (r->drafts.empty()) {
      r->num_computed = end;
      // A prompt chunk that ended on a block boundary leaves the state there to the prefix cache.
      if (prefix_ && r->prefix_identity && r->num_computed <= r->prompt_len() &&
          r->num_computed % prefix_->block_tokens() == 0)
        prefix_->insert(r->slot, r->tokens, *r->prefix_identity, r->id);
      continue;
    }
    // Fed positions stay valid while the fed draft equals the token the request now has there.
    int64_t valid = stream;
    while (valid < end && valid < static_cast<int64_t>(r->tokens.size()) &&
           r->drafts[static_cast<std::size_t>(valid - stream)] == r->tokens[static_cast<std::size_t>(valid)])
      ++valid;
    spec_stats_.verify_chunks++;
    spec_stats_.drafted += r->drafts.size();
    spec_stats_.accepted += static_cast<uint64_t>(valid - stream);
    if (hooks_) hooks_->on_rows_discarded(r->id, valid);
    r->drafts.clear();
    if (valid == end || r->finish != FinishReason::None) {
      r->num_computed = end;
      continue;
    }
    // Rejected rows leave no trace: the state goes back to before the pass (conv state, replay
    // ring, the boundary states the call moved; KV blocks only they used are returned), and the
    // next pass feeds the accepted tokens again — in exact mode to the same bits.
    cache_->load_state(r->slot, undo_[i]);
    if (cache::KvCache* kv = cache_->kv()) {
      kv->clear_positions(r->slot, n0, end);
      kv->truncate(r->slot, n0);
    }
    r->num_computed = n0;
    spec_stats_.rollbacks++;
  }
  std::vector<StepOutput> result;
  for (auto& [id, o] : outs) {
    Request* r = requests_[id].get();
    if (r->finish != FinishReason::None) {
      o.finished = r->finish;
      finish_request(r);
    }
    result.push_back(std::move(o));
  }
  return result;
}

void Engine::propose_drafts(std::vector<ScheduledChunk>& chunks) {
  std::vector<DraftQuery> queries;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    Request* r = chunks[i].req;
    r->drafts.clear();
    const int64_t real = static_cast<int64_t>(r->tokens.size()) - r->num_computed;
    const int room = r->spec_allowance > 0 ? static_cast<int>(chunks[i].n - real) : 0;
    if (room <= 0) continue;
    queries.push_back({r->id, &r->tokens, room, {}});
    which.push_back(i);
  }
  if (queries.empty()) return;
  drafter_->propose(queries);
  for (std::size_t q = 0; q < queries.size(); ++q) {
    ScheduledChunk& c = chunks[which[q]];
    Request* r = c.req;
    const int64_t real = static_cast<int64_t>(r->tokens.size()) - r->num_computed;
    r->drafts = std::move(queries[q].drafts);
    if (static_cast<int>(r->drafts.size()) > queries[q].room) r->drafts.resize(static_cast<std::size_t>(queries[q].room));
    c.n = static_cast<int>(real + static_cast<int64_t>(r->drafts.size()));
  }
}

void Engine::take_rows(Request* r, const std::vector<std::pair<int64_t, const float*>>& rows, StepOutput& o) {
  const int V = model_.vocab_size();
  const int64_t stream = static_cast<int64_t>(r->tokens.size());
  const bool want_raw = r->spec.return_logits || r->spec.return_prompt_logits;
  for (const auto& [pos, lrow] : rows) {
    if (r->finish != FinishReason::None) break;
    // A draft row counts only when its draft became the request's token there.
    if (pos >= stream && (pos >= static_cast<int64_t>(r->tokens.size()) ||
                          r->drafts[static_cast<std::size_t>(pos - stream)] != r->tokens[static_cast<std::size_t>(pos)]))
      break;
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
      tok = r->spec.forced[static_cast<std::size_t>(r->num_generated)];
    } else {
      // The draw depends on (seed, index of the generated token) only: the same with or without
      // speculation, so a draft is accepted exactly when it is the token this row gives.
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
}

void Engine::finish_request(Request* r) {
  sched_->finish(r);
  if (drafter_) drafter_->forget(r->id);
  if (finish_listener_) finish_listener_(r->id, r->finish);
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
