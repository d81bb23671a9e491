#include "frontends/server/engine_loop.h"

#include <algorithm>

#include "common/error.h"
#include "engine/sampler.h"

namespace parity::server {

// ---- Ticket (HTTP thread side, except deliver/set_state) ----

std::vector<SequenceEvent> Ticket::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(m_);
  cv_.wait_for(lk, timeout, [&] { return !events_.empty() || state_ == State::Rejected || state_ == State::Finished; });
  std::vector<SequenceEvent> out;
  out.swap(events_);
  return out;
}

Ticket::State Ticket::wait_admission() {
  std::unique_lock<std::mutex> lk(m_);
  cv_.wait(lk, [&] { return state_ != State::Queued; });
  return state_;
}

Ticket::State Ticket::state() const {
  std::lock_guard<std::mutex> lk(m_);
  return state_;
}

std::string Ticket::error() const {
  std::lock_guard<std::mutex> lk(m_);
  return error_;
}

void Ticket::cancel() {
  if (cancelled_.exchange(true)) return;
  loop_->request_abort(shared_from_this(), -1);
}

void Ticket::cancel_sequence(int index) { loop_->request_abort(shared_from_this(), index); }

void Ticket::deliver(SequenceEvent e, bool last) {
  {
    std::lock_guard<std::mutex> lk(m_);
    events_.push_back(std::move(e));
    if (last) state_ = State::Finished;
  }
  cv_.notify_all();
}

void Ticket::set_state(State s, std::string error) {
  {
    std::lock_guard<std::mutex> lk(m_);
    state_ = s;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

// ---- EngineLoop ----

EngineLoop::EngineLoop(engine::Engine& eng, int vocab_size, int max_sequences)
    : eng_(eng), vocab_(vocab_size), max_sequences_(max_sequences) {
  refresh_stats();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

std::shared_ptr<Ticket> EngineLoop::submit(std::vector<engine::RequestSpec> specs, std::vector<int> prompt_logprobs) {
  if (draining_ || !healthy_ || specs.empty()) return nullptr;
  const int k = static_cast<int>(specs.size());
  int cur = outstanding_.load();
  do {
    if (cur + k > max_sequences_) return nullptr;
  } while (!outstanding_.compare_exchange_weak(cur, cur + k));
  auto t = std::make_shared<Ticket>();
  t->loop_ = this;
  for (int i = 0; i < k; ++i)
    t->seqs_.push_back({std::move(specs[i]), i < static_cast<int>(prompt_logprobs.size()) ? prompt_logprobs[i] : -1, 0, false});
  t->unfinished_ = k;
  {
    std::lock_guard<std::mutex> lk(m_);
    if (stop_) {  // the loop thread is gone or going: nobody would admit it
      outstanding_ -= k;
      return nullptr;
    }
    inbox_.push_back(t);
  }
  cv_.notify_all();
  return t;
}

void EngineLoop::request_abort(std::shared_ptr<Ticket> t, int index) {
  {
    std::lock_guard<std::mutex> lk(m_);
    aborts_.emplace_back(std::move(t), index);
  }
  cv_.notify_all();
}

void EngineLoop::drain() { draining_ = true; }

bool EngineLoop::idle() const { return outstanding_.load() == 0; }

void EngineLoop::abort_all() {
  {
    std::lock_guard<std::mutex> lk(m_);
    abort_all_ = true;
  }
  cv_.notify_all();
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lk(m_);
    if (!thread_.joinable()) return;
    stop_ = true;
    abort_all_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

LoopStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lk(stats_m_);
  return stats_;
}

void EngineLoop::admit(const std::shared_ptr<Ticket>& t) {
  if (t->cancelled_) {  // the client left before its turn
    outstanding_ -= static_cast<int>(t->seqs_.size());
    t->set_state(Ticket::State::Finished);
    return;
  }
  std::size_t i = 0;
  try {
    for (; i < t->seqs_.size(); ++i) {
      t->seqs_[i].engine_id = eng_.add_request(t->seqs_[i].spec);
      owners_[t->seqs_[i].engine_id] = {t, static_cast<int>(i)};
    }
  } catch (const Error& e) {
    // All or nothing: a ticket whose sequence i is refused leaves nothing in the engine.
    for (std::size_t k = 0; k < i; ++k) {
      eng_.abort(t->seqs_[k].engine_id);
      owners_.erase(t->seqs_[k].engine_id);
    }
    outstanding_ -= static_cast<int>(t->seqs_.size());
    std::lock_guard<std::mutex> lk(stats_m_);
    stats_.sequences_rejected += t->seqs_.size();
    t->set_state(Ticket::State::Rejected, e.what());
    return;
  }
  uint64_t prompt_tokens = 0;
  for (const auto& s : t->seqs_) prompt_tokens += s.spec.prompt.size();
  {
    std::lock_guard<std::mutex> lk(stats_m_);
    stats_.prompt_tokens += prompt_tokens;
  }
  t->set_state(Ticket::State::Running);
}

void EngineLoop::finish_seq(Ticket& t, int index, SequenceEvent e) {
  Ticket::Seq& s = t.seqs_[static_cast<std::size_t>(index)];
  s.finished = true;
  owners_.erase(s.engine_id);
  --outstanding_;
  {
    std::lock_guard<std::mutex> lk(stats_m_);
    if (e.finished == engine::FinishReason::Aborted) ++stats_.sequences_aborted;
    else ++stats_.sequences_finished;
  }
  const bool last = --t.unfinished_ == 0;
  t.deliver(std::move(e), last);
}

void EngineLoop::abort_ticket(const std::shared_ptr<Ticket>& t, int index) {
  // Queued: still in the inbox, admit() sees cancelled_; Rejected / Finished: nothing in the engine.
  if (t->state() != Ticket::State::Running) return;
  for (std::size_t i = 0; i < t->seqs_.size(); ++i) {
    if (index >= 0 && static_cast<int>(i) != index) continue;
    Ticket::Seq& s = t->seqs_[i];
    if (s.finished) continue;
    eng_.abort(s.engine_id);
    SequenceEvent e;
    e.index = static_cast<int>(i);
    e.finished = engine::FinishReason::Aborted;
    finish_seq(*t, static_cast<int>(i), std::move(e));
  }
}

void EngineLoop::run() {
  for (;;) {
    std::vector<std::shared_ptr<Ticket>> incoming;
    std::vector<std::pair<std::shared_ptr<Ticket>, int>> aborts;
    bool all = false, stopping = false;
    {
      std::unique_lock<std::mutex> lk(m_);
      cv_.wait(lk, [&] { return stop_ || abort_all_ || !inbox_.empty() || !aborts_.empty() || eng_.has_unfinished(); });
      incoming.swap(inbox_);
      aborts.swap(aborts_);
      all = abort_all_;
      abort_all_ = false;
      stopping = stop_;
    }
    // Aborts first: a cancelled ticket still in `incoming` is dropped by admit().
    for (auto& [t, index] : aborts) abort_ticket(t, index);
    for (auto& t : incoming) {
      if (stopping) t->cancelled_ = true;
      admit(t);
    }
    if (all) {
      std::vector<std::shared_ptr<Ticket>> open;
      for (auto& [id, o] : owners_) open.push_back(o.ticket);
      for (auto& t : open) abort_ticket(t, -1);
    }
    if (stopping && !eng_.has_unfinished()) break;
    if (!eng_.has_unfinished()) {
      refresh_stats();
      continue;
    }

    std::vector<engine::StepOutput> outs;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      outs = eng_.step();
    } catch (const std::exception& e) {
      // The engine's state can no longer be trusted: fail every request and refuse new ones.
      healthy_ = false;
      std::vector<std::shared_ptr<Ticket>> open;
      for (auto& [id, o] : owners_) open.push_back(o.ticket);
      for (auto& t : open) abort_ticket(t, -1);
      refresh_stats();
      continue;
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (engine::StepOutput& o : outs) {
      auto it = owners_.find(o.id);
      if (it == owners_.end()) continue;
      Owner own = it->second;
      Ticket::Seq& s = own.ticket->seqs_[static_cast<std::size_t>(own.index)];
      SequenceEvent e;
      e.index = own.index;
      e.tokens = std::move(o.new_tokens);
      e.logprobs = std::move(o.logprobs);
      {
        // Counted before the delivery: a client that has its last token sees it in the stats.
        std::lock_guard<std::mutex> lk(stats_m_);
        stats_.generation_tokens += e.tokens.size();
      }
      if (s.prompt_logprobs >= 0) {
        // Row p is the distribution after token p: it scores prompt token p + 1.
        const auto& prompt = s.spec.prompt;
        for (std::size_t r = 0; r < o.logit_rows.size(); ++r) {
          const int64_t p = o.logit_positions[r];
          if (p + 1 >= static_cast<int64_t>(prompt.size())) continue;
          e.prompt_logprobs.push_back(engine::top_logprobs(o.logit_rows[r].data(), vocab_, s.prompt_logprobs,
                                                           prompt[static_cast<std::size_t>(p + 1)]));
        }
      }
      e.finished = o.finished;
      if (o.finished != engine::FinishReason::None) finish_seq(*own.ticket, own.index, std::move(e));
      else own.ticket->deliver(std::move(e), false);
    }
    {
      std::lock_guard<std::mutex> lk(stats_m_);
      ++stats_.steps;
      stats_.step_seconds_sum += dt;
      for (std::size_t b = 0; b < LoopStats::kStepBuckets.size(); ++b)
        if (dt <= LoopStats::kStepBuckets[b]) ++stats_.step_buckets[b];
    }
    refresh_stats();
  }
  refresh_stats();
}

void EngineLoop::refresh_stats() {
  const cache::ModelCache& c = eng_.cache();
  const int64_t used = c.num_slots() - c.num_free();
  std::lock_guard<std::mutex> lk(stats_m_);
  stats_.slots_total = c.num_slots();
  stats_.sequences_running = used;
  stats_.sequences_waiting = std::max<int64_t>(0, outstanding_.load() - used);
  if (const cache::KvCache* kv = c.kv()) {
    stats_.kv_blocks_total = kv->num_blocks();
    stats_.kv_blocks_free = kv->num_free_blocks();
  }
  if (const cache::PrefixCache* pc = eng_.prefix_cache()) {
    const cache::PrefixCacheStats& ps = pc->stats();
    stats_.prefix_caching = true;
    stats_.prefix_lookups = ps.lookups;
    stats_.prefix_hits = ps.hits;
    stats_.prefix_lookup_tokens = ps.lookup_tokens;
    stats_.prefix_hit_tokens = ps.hit_tokens;
  }
  if (eng_.config().speculative.num_tokens > 0) {
    stats_.speculation = true;
    stats_.spec_drafted = eng_.speculation_stats().drafted;
    stats_.spec_accepted = eng_.speculation_stats().accepted;
  }
  stats_.healthy = healthy_;
}

}  // namespace parity::server
