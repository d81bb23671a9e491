#pragma once
// `parity serve`: an OpenAI-compatible HTTP server (cpp-httplib) in front of one engine running
// on its own thread. Endpoints, flags and limits: docs/serving.md.
#include <cstddef>
#include <string>

#include "engine/engine.h"
#include "frontends/server/text_codec.h"
#include "model/model.h"

namespace parity::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0: any free port (the chosen one is printed)
  std::string api_key;                  // empty: no authentication
  std::string model_name;               // the id clients send as "model"
  std::size_t max_body_bytes = 1 << 20; // larger bodies get 413
  int max_queue = 64;                   // sequences that may wait beyond max_num_seqs; then 503
  int http_threads = 0;                 // 0: enough for every admissible request plus a few
  double shutdown_grace_s = 30;         // SIGTERM: in-flight requests get this long, then abort
};

// Blocks SIGTERM and SIGINT in the calling thread and every thread it creates later, so that the
// server's own signal thread receives them. Call before anything starts threads.
void block_shutdown_signals();

// Serves until SIGTERM or SIGINT, then drains (finishing in-flight requests within the grace
// time, aborting the rest) and returns 0. Throws parity::Error when it cannot listen.
int serve(const model::Model& model, engine::Engine& eng, const TextCodec* codec, const ServeOptions& opt);

}  // namespace parity::server
