// parity serve: the OpenAI-compatible HTTP server (src/frontends/server, docs/serving.md).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/engine_flags.h"
#include "frontends/server/server.h"
#include "frontends/server/text_codec.h"

namespace parity::cli {

Runner add_serve(CLI::App& app) {
  struct Opts {
    EngineFlags engine;
    std::string model;
    server::ServeOptions serve;
  };
  auto o = std::make_shared<Opts>();
  // A server runs more requests at once, and shorter ones, than generate.
  o->engine.max_num_seqs = 16;
  o->engine.max_model_len = 4096;
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, …)");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME")->required();
  sub->add_option("--host", o->serve.host, "address to listen on (default 127.0.0.1: this machine only)");
  sub->add_option("--port", o->serve.port, "port (0: any free port; the chosen one is printed)")->check(CLI::Range(0, 65535));
  sub->add_option("--api-key", o->serve.api_key,
                  "require 'Authorization: Bearer KEY' on every endpoint but /health (default: $PARITY_API_KEY)");
  sub->add_option("--served-model-name", o->serve.model_name, "the model id clients send (default: MODEL as given)");
  sub->add_option("--max-queue", o->serve.max_queue, "sequences that may wait beyond --max-num-seqs; more get 503")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--max-body-bytes", o->serve.max_body_bytes, "largest request body; larger gets 413 (default 1 MiB)")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--shutdown-grace", o->serve.shutdown_grace_s,
                  "seconds SIGTERM lets in-flight requests finish before aborting them (default 30)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--http-threads", o->serve.http_threads, "HTTP worker threads (default: max-num-seqs + max-queue + 16)")
      ->check(CLI::Range(1, 1 << 16));
  add_engine_flags(sub, o->engine, {.preempt = false});
  sub->get_option("--max-num-seqs")->description("sequences per pass (running at once)");
  sub->get_option("--max-model-len")->description("longest request: prompt + max_tokens (default 4096)");
  sub->get_option("--state-memory-mb")->description("state + KV cache budget in MiB (default: one slot per sequence)");
  sub->get_option("--threads")->description("worker threads of the engine (default: all cores)");
  return [o]() {
    // Before any thread exists (OpenMP's included), so only the server's signal thread sees SIGTERM.
    server::block_shutdown_signals();
    const nlohmann::json additional = o->engine.check();
    if (o->serve.api_key.empty())
      if (const char* k = std::getenv("PARITY_API_KEY")) o->serve.api_key = k;
    if (o->serve.model_name.empty()) o->serve.model_name = o->model;
    frontends::EngineSession session = frontends::open_engine(o->model, o->engine, additional);
    auto codec = server::TextCodec::for_model(o->model);
    std::fputs(session.engine->plan().describe().c_str(), stderr);
    std::fprintf(stderr, "parity serve: %s mode, %s\n", o->engine.numerics.exact ? "exact" : "plain",
                 codec ? "tokenizer loaded" : "no tokenizer (token-id prompts only)");
    return server::serve(*session.model, *session.engine, codec.get(), o->serve);
  };
}

}  // namespace parity::cli
