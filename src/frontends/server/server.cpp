#include "frontends/server/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "frontends/server/api_request.h"
#include "frontends/server/auth.h"
#include "frontends/server/completion_job.h"
#include "frontends/server/engine_loop.h"
#include "frontends/server/metrics.h"
#include "frontends/server/responses.h"
#include "frontends/server/sse.h"

namespace parity::server {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// How long a response waits for engine news before checking on the client, and how long a
// response may stay silent before a keep-alive is written (the write is what reveals a client
// that went away: the connection's second write after the peer closed fails).
constexpr auto kPoll = 50ms;
constexpr auto kHeartbeat = 1000ms;
// A non-streaming answer that is ready within this time goes out with a Content-Length;
// a slower one is sent chunked, with whitespace (valid before JSON) as its keep-alive.
constexpr auto kPlainWait = 1000ms;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) { reply_json(res, e.status, error_body(e)); }

ApiError api_error(int status, std::string message, std::string type) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  return e;
}

const char* status_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "NotFoundError";
    case 413: return "invalid_request_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "internal_error" : "invalid_request_error";
  }
}

class Server {
 public:
  Server(const model::Model& model, engine::Engine& eng, const TextCodec* codec, const ServeOptions& opt)
      : opt_(opt), codec_(codec), eng_(eng),
        loop_(eng, model.vocab_size(), eng.config().sched.max_num_seqs + opt.max_queue),
        created_(static_cast<int64_t>(std::time(nullptr))) {
    limits_.model_name = opt.model_name;
    limits_.vocab_size = model.vocab_size();
    limits_.max_model_len = eng.config().max_model_len;
    limits_.codec = codec;
    limits_.max_sequences = loop_.max_sequences();
    if (codec) eos_ = codec->eos_token_id();
    routes();
  }

  int run();

 private:
  void routes();
  void generation(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void shutdown_on_signal();

  ServeOptions opt_;
  const TextCodec* codec_;
  engine::Engine& eng_;
  EngineLoop loop_;
  ApiLimits limits_;
  std::optional<int32_t> eos_;
  int64_t created_;
  Metrics metrics_;
  httplib::Server http_;
  std::atomic<bool> draining_{false};
  int listen_fd_ = -1;
};

void Server::routes() {
  // httplib listens with a backlog of 5: a burst of clients connecting at once overflows it and
  // their SYNs wait for the kernel's one-second retransmit. Keep the socket to listen again with
  // a deep backlog after binding (and set SO_REUSEADDR only: a second server on the port fails).
  http_.set_socket_options([this](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = fd;
  });
  http_.set_payload_max_length(opt_.max_body_bytes);
  http_.set_keep_alive_timeout(2);
  const int threads = opt_.http_threads > 0 ? opt_.http_threads : loop_.max_sequences() + 16;
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };

  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opt_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (bearer_matches(req.get_header_value("Authorization"), opt_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    reply_error(res, api_error(401, "missing or wrong API key: send 'Authorization: Bearer <key>'", "authentication_error"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib raises itself (unknown path 404, body too large 413, malformed request 400)
  // get the same JSON body as ours.
  http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = res.status == 413   ? "the request body is larger than the server's limit (--max-body-bytes)"
                      : res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                                          : "the request could not be handled (HTTP " + std::to_string(res.status) + ")";
    reply_error(res, api_error(res.status, msg, status_type(res.status)));
  });
  http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    reply_error(res, api_error(500, what, "internal_error"));
  });
  http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_request(req.path, res.status);
  });

  http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = loop_.stats().healthy && !draining_;
    res.status = ok ? 200 : 503;
    if (!ok) res.set_content(draining_ ? "shutting down" : "engine failed", "text/plain");
  });
  http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    reply_json(res, 200, models_list(opt_.model_name, limits_.max_model_len, created_));
  });
  http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(loop_.stats(), loop_.max_sequences()), "text/plain; version=0.0.4");
  });
  http_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = parse_tokenize_request(req.body, limits_);
    if (auto* e = std::get_if<ApiError>(&p)) return reply_error(res, *e);
    const auto& t = std::get<TokenizeRequest>(p).tokens;
    reply_json(res, 200, {{"count", t.size()}, {"max_model_len", limits_.max_model_len}, {"tokens", t}, {"token_strs", nullptr}});
  });
  http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = parse_detokenize_request(req.body, limits_);
    if (auto* e = std::get_if<ApiError>(&p)) return reply_error(res, *e);
    reply_json(res, 200, {{"prompt", codec_->decode(std::get<DetokenizeRequest>(p).tokens, false)}});
  });
  http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generation(req, res, Endpoint::Completions);
  });
  http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generation(req, res, Endpoint::ChatCompletions);
  });
}

void Server::generation(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  auto parsed = endpoint == Endpoint::Completions ? parse_completion_request(req.body, limits_)
                                                  : parse_chat_request(req.body, limits_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(res, *e);
  GenerationRequest& gr = std::get<GenerationRequest>(parsed);

  // Without a seed a request samples from a fresh random one (vLLM's behaviour); with one, choice
  // i of a prompt uses seed + i and reproduces `parity generate --seed seed+i`.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const uint64_t fallback_seed = rng();
  std::vector<engine::RequestSpec> specs;
  std::vector<int> prompt_logprobs;
  for (std::size_t p = 0; p < gr.prompts.size(); ++p)
    for (int c = 0; c < gr.n; ++c) {
      specs.push_back(gr.spec(p, c, fallback_seed, eos_));
      prompt_logprobs.push_back(gr.echo && gr.logprobs ? *gr.logprobs : -1);
    }
  std::shared_ptr<Ticket> ticket = loop_.submit(std::move(specs), std::move(prompt_logprobs));
  if (!ticket) {
    res.set_header("Retry-After", "1");
    const bool ok = loop_.stats().healthy;
    return reply_error(res, api_error(503,
                                      draining_ ? "the server is shutting down"
                                      : !ok     ? "the engine failed; this replica serves no more requests"
                                                : "the server is at its admission limit (" +
                                                      std::to_string(loop_.max_sequences()) +
                                                      " sequences queued or running); retry later",
                                      "service_unavailable"));
  }
  if (ticket->wait_admission() == Ticket::State::Rejected)
    return reply_error(res, api_error(400, ticket->error(), "invalid_request_error"));

  const bool stream = gr.stream;
  auto job = std::make_shared<CompletionJob>(std::move(gr), ticket, codec_, opt_.model_name, created_);

  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // nginx: pass events through unbuffered
    auto silent = std::make_shared<std::chrono::milliseconds>(0);
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, silent](std::size_t, httplib::DataSink& sink) {
          std::string out = job->advance(kPoll);
          if (out.empty() && !job->done()) {
            *silent += kPoll;
            if (*silent < kHeartbeat) return true;
            out = sse_keepalive();
          }
          *silent = 0ms;
          if (!sink.write(out.data(), out.size())) {
            job->cancel();  // the client went away: free its slot
            return false;
          }
          if (job->done()) sink.done();
          return true;
        },
        [job](bool success) {
          if (!success) job->cancel();
        });
    return;
  }

  const auto start = std::chrono::steady_clock::now();
  while (!job->done() && std::chrono::steady_clock::now() - start < kPlainWait) job->advance(kPoll);
  if (job->done()) return reply_json(res, 200, job->response());
  auto silent = std::make_shared<std::chrono::milliseconds>(0);
  res.set_chunked_content_provider(
      "application/json",
      [job, silent](std::size_t, httplib::DataSink& sink) {
        job->advance(kPoll);
        std::string out;
        if (job->done()) {
          out = dump(job->response());
        } else {
          *silent += kPoll;
          if (*silent < kHeartbeat) return true;
          out = " ";
        }
        *silent = 0ms;
        if (!sink.write(out.data(), out.size())) {
          job->cancel();
          return false;
        }
        if (job->done()) sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->cancel();
      });
}

void Server::shutdown_on_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "parity serve: %s: finishing in-flight requests (up to %.0f s), refusing new ones\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", opt_.shutdown_grace_s);
  draining_ = true;
  loop_.drain();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.shutdown_grace_s);
  while (!loop_.idle() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  if (!loop_.idle()) {
    std::fprintf(stderr, "parity serve: grace time over: aborting the requests still running\n");
    loop_.abort_all();
    while (!loop_.idle()) std::this_thread::sleep_for(10ms);
  }
  // Let the responses that just finished reach their clients before the listener closes.
  std::this_thread::sleep_for(200ms);
  http_.stop();
}

int Server::run() {
  int port = opt_.port;
  if (port == 0) {
    port = http_.bind_to_any_port(opt_.host);
    if (port < 0) throw Error("cannot listen on " + opt_.host + " (any port)");
  } else if (!http_.bind_to_port(opt_.host, port)) {
    throw Error("cannot listen on " + opt_.host + ":" + std::to_string(port) + " (in use, or not an address of this host)");
  }
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  std::fprintf(stderr, "parity serve: model '%s' listening on http://%s:%d%s\n", opt_.model_name.c_str(),
               opt_.host.c_str(), port, opt_.api_key.empty() ? "" : " (API key required)");
  std::fflush(stderr);
  std::thread signals([this] { shutdown_on_signal(); });
  const bool ok = http_.listen_after_bind();
  if (!ok && !draining_) {
    pthread_kill(signals.native_handle(), SIGTERM);  // wake the signal thread so it can be joined
  }
  signals.join();
  loop_.stop();
  std::fprintf(stderr, "parity serve: stopped\n");
  return ok || draining_ ? 0 : 1;
}

}  // namespace

void block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that vanished must not kill the server on write
}

int serve(const model::Model& model, engine::Engine& eng, const TextCodec* codec, const ServeOptions& opt) {
  Server s(model, eng, codec, opt);
  return s.run();
}

}  // namespace parity::server
