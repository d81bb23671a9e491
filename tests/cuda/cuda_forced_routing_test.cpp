// Router replacement on the GPU against Hugging Face (issue 14): the router logits of
// tests/data/granite_hybrid/forced_router_logits.safetensors (they move most tokens' top-2 experts) are
// injected through the accuracy toolkit's replacement session into the CUDA model, as
// accuracy_forced_routing_test.cpp does on the CPU; the logits must then equal HF's float64 run under the same
// injection (forced_reference_logits.safetensors) as closely as the CPU model does. The companion: without the
// injection the GPU's logits are far from that reference. Both router-override patterns (Direct: the
// replacement is the block's override argument; Fused: it goes through the dense-affinity routing)
// must do so, and give the same logits bit for bit (the stated tolerance between them is 0).
#include <cmath>
#include <cstdio>

#include "accuracy/replacement_session.h"
#include "backend_cuda/backend.h"
#include "common/error.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

std::vector<float> read_logits(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  const io::TensorView* t = f->find("logits");
  if (t == nullptr) throw Error(path + ": no 'logits' tensor");
  const float* p = static_cast<const float*>(t->data);
  return std::vector<float>(p, p + t->numel());
}

using test::relative_error;

// All rows of one single-shot score, with HF's forced router logits injected when `inject`.
std::vector<float> forced_rows(const model::Model& m, const std::vector<int32_t>& toks, const std::string& dir,
                               bool inject) {
  if (!inject) return model::score_all_rows(m, toks, model::ScanMode::Exact);
  accuracy::ReplacementConfig cfg;
  cfg.tensors_path = dir + "/forced_router_logits.safetensors";
  cfg.prompt_token_ids = std::vector<std::vector<int32_t>>{toks};
  accuracy::ReplacementSession s(cfg, m);
  s.replacer().register_request(0, toks);
  return model::score_all_rows(m, toks, model::ScanMode::Exact, &s.hooks());
}

TEST(CudaForcedRouting, InjectedHfRouterLogitsReproduceHfOnTheGpuAsOnTheCpu) {
  PARITY_REQUIRE_GPU();
  const std::string dir = test::test_data() + "/granite_hybrid";
  const auto toks = io::read_tokens(dir + "/tokens.json");
  const std::vector<float> ref = read_logits(dir + "/forced_reference_logits.safetensors");
  const auto cpu = model::load_model(model::open_checkpoint(dir));
  const double cpu_err = relative_error(forced_rows(*cpu, toks, dir, true), ref.data());
  std::vector<float> direct_rows;
  for (model::MoeRoutingPattern p : {model::MoeRoutingPattern::Direct, model::MoeRoutingPattern::Fused}) {
    SCOPED_TRACE(model::moe_routing_name(p));
    backend_cuda::CudaModelOptions o;
    o.fp32 = true;  // the accuracy path: fp32 GEMM, so the comparison measures the routing, not bf16 inputs
    o.moe_routing = p;
    const auto gpu = backend_cuda::load_model(model::open_checkpoint(dir), o);
    const std::vector<float> got = forced_rows(*gpu, toks, dir, true);
    const double gpu_err = relative_error(got, ref.data());
    // Sanitizer mode: the companion (no injection) under the Direct pattern only.
    const bool companion = !test::sanitizing() || p == model::MoeRoutingPattern::Direct;
    const double natural = companion ? relative_error(forced_rows(*gpu, toks, dir, false), ref.data()) : 1.0;
    std::fprintf(stderr,
                 "[ measured ] forced routing vs HF (%s): cuda fp32 %.3g, cpu %.3g, cuda without injection %.3g\n",
                 model::moe_routing_name(p), gpu_err, cpu_err, natural);
    EXPECT_LE(gpu_err, std::max(10 * cpu_err, 1e-5));
    if (companion) {
      EXPECT_GT(natural, 100 * gpu_err) << "without the injection the routing differs, so the check can fail";
    }
    if (p == model::MoeRoutingPattern::Direct) {
      direct_rows = got;
      continue;
    }
    ASSERT_EQ(got.size(), direct_rows.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(test::same_bits(&got[i], &direct_rows[i], 1))
          << "fused vs direct under the injection: first mismatch at " << i << ": " << got[i] << " vs "
          << direct_rows[i];
  }
}

}  // namespace
}  // namespace parity
