// parity serve: the OpenAI-compatible HTTP server (src/frontends/server, docs/serving.md).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accuracy/additional_config.h"
#include "common/error.h"
#include "engine/engine.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/device_flags.h"
#include "frontends/cli/moe_routing_flag.h"
#include "frontends/cli/numerics_flags.h"
#include "frontends/cli/serving_flags.h"
#include "frontends/server/server.h"
#include "frontends/server/text_codec.h"
#include "kernels/isa.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace parity::cli {

Runner add_serve(CLI::App& app) {
  struct Opts {
    DeviceFlags dev;
    ServingFlags serving;
    std::string model, additional, moe_routing;
    int threads = 0, max_batched = 2048, max_seqs = 16;
    int64_t max_model_len = 4096;
    double state_mb = 0;
    NumericsFlags num;
    server::ServeOptions serve;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, …)");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME")->required();
  add_device_flags(sub, o->dev);
  add_serving_flags(sub, o->serving);
  add_numerics_flags(sub, o->num);
  sub->add_option("--host", o->serve.host, "address to listen on (default 127.0.0.1: this machine only)");
  sub->add_option("--port", o->serve.port, "port (0: any free port; the chosen one is printed)")->check(CLI::Range(0, 65535));
  sub->add_option("--api-key", o->serve.api_key,
                  "require 'Authorization: Bearer KEY' on every endpoint but /health (default: $PARITY_API_KEY)");
  sub->add_option("--served-model-name", o->serve.model_name, "the model id clients send (default: MODEL as given)");
  sub->add_option("--max-num-batched-tokens", o->max_batched, "token budget per pass")->check(CLI::Range(1, 1 << 24));
  sub->add_option("--max-num-seqs", o->max_seqs, "sequences per pass (running at once)")->check(CLI::Range(1, 4096));
  sub->add_option("--max-model-len", o->max_model_len, "longest request: prompt + max_tokens (default 4096)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-queue", o->serve.max_queue, "sequences that may wait beyond --max-num-seqs; more get 503")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--max-body-bytes", o->serve.max_body_bytes, "largest request body; larger gets 413 (default 1 MiB)")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--shutdown-grace", o->serve.shutdown_grace_s,
                  "seconds SIGTERM lets in-flight requests finish before aborting them (default 30)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--http-threads", o->serve.http_threads, "HTTP worker threads (default: max-num-seqs + max-queue + 16)")
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--state-memory-mb", o->state_mb, "state + KV cache budget in MiB (default: one slot per sequence)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--threads", o->threads, "worker threads of the engine (default: all cores)")->check(CLI::Range(1, 1024));
  sub->add_option("--additional-config", o->additional, "JSON, e.g. {\"tensor_replacement\": {\"tensors_path\": …}}");
  add_moe_routing_flag(sub, o->moe_routing);
  return [o]() {
    // Before any thread exists (OpenMP's included), so only the server's signal thread sees SIGTERM.
    server::block_shutdown_signals();
    o->num.check();
    o->serving.check();
    if (o->serve.api_key.empty())
      if (const char* k = std::getenv("PARITY_API_KEY")) o->serve.api_key = k;
    if (o->serve.model_name.empty()) o->serve.model_name = o->model;
    if (o->threads > 0) kernels::set_num_threads(o->threads);
    engine::EngineConfig cfg;
    o->num.apply(cfg);
    cfg.sched.max_num_batched_tokens = o->max_batched;
    cfg.sched.max_num_seqs = o->max_seqs;
    cfg.max_model_len = o->max_model_len;
    cfg.state_memory_budget = static_cast<std::size_t>(o->state_mb * 1024.0 * 1024.0);
    const nlohmann::json additional =
        o->additional.empty() ? nlohmann::json::object() : accuracy::parse_additional_config(o->additional);
    accuracy::replacement_config_from_json(additional);

    auto model = o->dev.load(o->model, model_options(o->moe_routing));
    const auto draft = o->serving.load_draft();
    o->serving.apply(cfg, draft.get());
    auto codec = server::TextCodec::for_model(o->model);
    engine::Engine eng(*model, cfg);
    auto replacement = accuracy::make_replacement_from_additional_config(additional, *model);
    if (replacement) replacement->attach(eng);
    std::fputs(eng.plan().describe().c_str(), stderr);
    std::fprintf(stderr, "parity serve: %s mode, %s\n", o->num.exact ? "exact" : "plain",
                 codec ? "tokenizer loaded" : "no tokenizer (token-id prompts only)");
    return server::serve(*model, eng, codec.get(), o->serve);
  };
}

}  // namespace parity::cli
