#include "accuracy/capture_run.h"

#include <memory>

#include "accuracy/capture_hooks.h"
#include "accuracy/hooks_identity.h"
#include "common/error.h"

namespace parity::accuracy {
namespace {

// Replacement first, then capture: a capture of a replaced point records what the rest of the
// forward actually used.
class ChainedHooks : public model::ProbeHooks {
 public:
  ChainedHooks(model::ProbeHooks& first, model::ProbeHooks& second) : a_(first), b_(second) {}
  bool wants(const std::string& name) const override { return a_.wants(name) || b_.wants(name); }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) override {
    if (a_.wants(name)) a_.visit(name, data, rows, cols, meta);
    if (b_.wants(name)) b_.visit(name, data, rows, cols, meta);
  }
  // A fetched replacement is the point's value for this pass: the capture records it.
  bool fetch_replacement(const std::string& name, float* dst, int rows, int cols,
                         const model::ProbeRows& meta) override {
    if (!a_.wants(name) || !a_.fetch_replacement(name, dst, rows, cols, meta)) return false;
    if (b_.wants(name)) b_.visit(name, dst, rows, cols, meta);
    return true;
  }
  // Cached state serves a request only when both hooks allow it.
  std::optional<uint64_t> prefix_identity(uint64_t request) override {
    const auto a = a_.prefix_identity(request), b = b_.prefix_identity(request);
    if (!a || !b) return std::nullopt;
    return combine_identities(*a, *b);
  }
  void on_prefix_reuse(uint64_t request, uint64_t source, int64_t length) override {
    a_.on_prefix_reuse(request, source, length);
    b_.on_prefix_reuse(request, source, length);
  }
  void on_rows_discarded(uint64_t request, int64_t from) override {
    a_.on_rows_discarded(request, from);
    b_.on_rows_discarded(request, from);
  }

 private:
  model::ProbeHooks& a_;
  model::ProbeHooks& b_;
};

}  // namespace

Captures capture_through_engine(const model::Model& model, const CaptureSpec& spec) {
  if (spec.prompts.empty()) throw Error("capture: no prompt given");
  if (spec.modules.empty()) throw Error("capture: no module selected");
  if (spec.forced.size() > 1 && spec.forced.size() != spec.prompts.size())
    throw Error("capture: " + std::to_string(spec.forced.size()) + " forced continuations for " +
                std::to_string(spec.prompts.size()) + " prompts (give one shared or one per prompt)");
  CaptureHooks hooks(spec.modules);
  engine::Engine eng(model, spec.engine);
  std::unique_ptr<ChainedHooks> chain;
  if (spec.replacement) {
    chain = std::make_unique<ChainedHooks>(spec.replacement->hooks(), hooks);
    eng.set_probe_hooks(chain.get());
    spec.replacement->listen(eng);
  } else {
    eng.set_probe_hooks(&hooks);
  }
  std::vector<uint64_t> ids;
  for (std::size_t i = 0; i < spec.prompts.size(); ++i) {
    engine::RequestSpec r;
    r.prompt = spec.prompts[i];
    if (!spec.forced.empty()) r.forced = spec.forced[spec.forced.size() == 1 ? 0 : i];
    r.sampling.max_tokens = spec.max_tokens;
    ids.push_back(eng.add_request(std::move(r)));
  }
  auto results = eng.run_to_completion();

  Captures c;
  c.layout = spec.layout;
  c.metadata["source"] = "parity";
  c.metadata["model"] = model.origin();
  c.metadata["mode"] = spec.engine.mode == model::ScanMode::Exact ? "exact" : "plain";
  for (const auto& [k, v] : eng.numerics().metadata()) c.metadata[k] = v;
  c.metadata["max_num_batched_tokens"] = std::to_string(spec.engine.sched.max_num_batched_tokens);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const engine::RequestResult& r = results.at(ids[i]);
    const auto& prompt = spec.prompts[i];
    // A forced request feeds its last token too; a sampled one stops right after choosing it.
    const bool forced = !spec.forced.empty() && !spec.forced[spec.forced.size() == 1 ? 0 : i].empty();
    const int64_t fed = static_cast<int64_t>(prompt.size() + r.tokens.size()) - (forced || r.tokens.empty() ? 0 : 1);
    c.prompts.push_back(hooks.build(ids[i], prompt, r.tokens, fed, spec.layout));
  }
  return c;
}

}  // namespace parity::accuracy
