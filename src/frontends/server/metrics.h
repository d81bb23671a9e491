#pragma once
// /metrics in Prometheus' text format: HTTP requests by endpoint and status, prompt and generated
// tokens, sequences running and waiting (the queue depth) against the admission bound, engine step
// time, and cache use (state slots, KV blocks).
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "frontends/server/engine_loop.h"

namespace parity::server {

class Metrics {
 public:
  void count_request(const std::string& path, int status);
  std::string render(const LoopStats& s, int max_sequences) const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
};

}  // namespace parity::server
