#pragma once
// The engine on its own thread. HTTP handler threads submit a Ticket (one HTTP request's
// sequences: prompts × n) through a locked inbox; the loop admits it into the engine, steps the
// engine while anything is unfinished (continuous batching across clients) and hands each
// sequence's step outputs back to its ticket. Only the loop thread touches the Engine.
// Admission is bounded: at most `max_sequences` sequences may be queued or running; beyond that
// submit() refuses (the server answers 503 with Retry-After).
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace parity::server {

// What one step (or an abort) produced for one sequence of a ticket.
struct SequenceEvent {
  int index = 0;  // the sequence within its ticket
  std::vector<int32_t> tokens;
  std::vector<std::vector<engine::TokenLogprob>> logprobs;  // per token: chosen first, then the top N
  // Log-probs of prompt tokens 1.. (echo with logprobs), in order as their rows are computed.
  std::vector<std::vector<engine::TokenLogprob>> prompt_logprobs;
  engine::FinishReason finished = engine::FinishReason::None;
};

class EngineLoop;

class Ticket : public std::enable_shared_from_this<Ticket> {
 public:
  enum class State { Queued, Running, Rejected, Finished };

  // Waits up to `timeout` for news and returns the events since the last call.
  std::vector<SequenceEvent> wait(std::chrono::milliseconds timeout);
  State state() const;
  // Blocks until the loop has admitted or rejected the ticket; returns the state (Running, Rejected,
  // or already Finished: a short request can end before its client looks).
  State wait_admission();
  std::string error() const;  // why it was rejected
  // Aborts every unfinished sequence (the client went away); events stop coming.
  void cancel();
  // Aborts one sequence (a stop string ended it); an Aborted event follows.
  void cancel_sequence(int index);

 private:
  friend class EngineLoop;
  struct Seq {
    engine::RequestSpec spec;
    int prompt_logprobs = -1;  // top-N for prompt tokens; -1: none
    uint64_t engine_id = 0;
    bool finished = false;
  };
  EngineLoop* loop_ = nullptr;
  std::vector<Seq> seqs_;  // written by the loop thread only
  std::atomic<bool> cancelled_{false};
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<SequenceEvent> events_;
  State state_ = State::Queued;
  std::string error_;
  int unfinished_ = 0;  // loop thread only
  void deliver(SequenceEvent e, bool last);
  void set_state(State s, std::string error = {});
};

struct LoopStats {
  static constexpr std::array<double, 12> kStepBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                          0.1,   0.25,   0.5,   1.0,  2.5,   5.0};
  int64_t sequences_running = 0;  // holding a state slot
  int64_t sequences_waiting = 0;  // admitted or queued, not yet holding a slot
  int64_t slots_total = 0, kv_blocks_total = 0, kv_blocks_free = 0;
  uint64_t steps = 0;
  double step_seconds_sum = 0;
  std::array<uint64_t, kStepBuckets.size()> step_buckets{};  // cumulative counts ≤ bound
  uint64_t prompt_tokens = 0, generation_tokens = 0;
  uint64_t sequences_finished = 0, sequences_aborted = 0, sequences_rejected = 0;
  // The engine's serving features, when on (--enable-prefix-caching, --speculative-tokens).
  bool prefix_caching = false;
  uint64_t prefix_lookups = 0, prefix_hits = 0, prefix_lookup_tokens = 0, prefix_hit_tokens = 0;
  bool speculation = false;
  uint64_t spec_drafted = 0, spec_accepted = 0;
  bool healthy = true;
};

class EngineLoop {
 public:
  EngineLoop(engine::Engine& eng, int vocab_size, int max_sequences);
  ~EngineLoop();  // stop()

  // A ticket for these sequences, or nullptr when admitting them would pass the bound or the
  // loop is draining or unhealthy. prompt_logprobs[i]: top-N for sequence i's prompt tokens, -1: none.
  std::shared_ptr<Ticket> submit(std::vector<engine::RequestSpec> specs, std::vector<int> prompt_logprobs);
  void drain();                 // refuse every submit from now on
  bool idle() const;            // nothing queued or running
  void abort_all();             // every unfinished sequence ends now as Aborted
  void stop();                  // aborts what is left, joins the thread
  LoopStats stats() const;
  int max_sequences() const { return max_sequences_; }

 private:
  friend class Ticket;
  void run();
  void admit(const std::shared_ptr<Ticket>& t);
  void finish_seq(Ticket& t, int index, SequenceEvent e);
  void abort_ticket(const std::shared_ptr<Ticket>& t, int index);  // index -1: all
  void refresh_stats();
  void request_abort(std::shared_ptr<Ticket> t, int index);

  engine::Engine& eng_;
  const int vocab_;
  const int max_sequences_;
  std::atomic<int> outstanding_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> healthy_{true};

  mutable std::mutex m_;  // guards inbox_, aborts_, stop_
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Ticket>> inbox_;
  std::vector<std::pair<std::shared_ptr<Ticket>, int>> aborts_;
  bool stop_ = false;
  bool abort_all_ = false;

  // loop thread only
  struct Owner {
    std::shared_ptr<Ticket> ticket;
    int index;
  };
  std::unordered_map<uint64_t, Owner> owners_;

  mutable std::mutex stats_m_;
  LoopStats stats_;
  std::thread thread_;
};

}  // namespace parity::server
