// Mamba2 on the GPU end to end: the exactness gate's schedules (0 mismatched rows in exact mode
// for both state dtypes; plain mode mismatches), logits against the committed float64 references
// (bf16 GEMM inputs: no worse than Hugging Face in bf16; the fp32 path within 10× of the CPU),
// and probe points (capture sees the tensor, a replacement changes the logits).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend_cuda/backend.h"
#include "common/error.h"
#include "engine/exactness_gate.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "kernels_cuda/ssd_tc.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "tests/cuda/gpu_gate_support.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

std::unique_ptr<model::Model> gpu_model(const std::string& spec, bool fp32 = false) {
  backend_cuda::CudaModelOptions o;
  o.fp32 = fp32;
  return backend_cuda::load_model(model::open_checkpoint(spec), o);
}

TEST(CudaModel, ExactModeIsBitIdenticalUnderTheGateSchedulesAndPlainIsNot) {
  PARITY_REQUIRE_GPU();
  auto m = gpu_model("builtin:tiny");
  const test::GateTally t = test::run_gpu_gate(*m);
  EXPECT_GT(t.exact_rows, test::gate_min_rows(1000));
  EXPECT_EQ(t.exact_bad, 0);
  EXPECT_GT(t.plain_bad, 0) << "companion: plain mode's rows should change with the schedule";
}

struct Accuracy {
  double rel, argmax_agree;
};

// Logits of `rows` rows against reference ones: relative L2 error, and how often the argmax agrees.
Accuracy compare_logits(const std::vector<float>& got, const float* r, std::size_t rows, int V) {
  double num2 = 0, den = 0;
  int agree = 0;
  for (std::size_t t = 0; t < rows; ++t) {
    int ag = 0, ar = 0;
    for (int v = 0; v < V; ++v) {
      const std::size_t i = t * V + v;
      const double d = double(got[i]) - r[i];
      num2 += d * d;
      den += double(r[i]) * r[i];
      if (got[i] > got[t * V + ag]) ag = v;
      if (r[i] > r[t * V + ar]) ar = v;
    }
    agree += ag == ar;
  }
  return {std::sqrt(num2 / den), double(agree) / double(rows)};
}

Accuracy against_reference(const model::Model& m, const std::string& dir, const cache::Numerics& num) {
  auto toks = io::read_tokens(dir + "/tokens.json");
  auto ref_file = io::SafetensorsFile::open(dir + "/reference_logits.safetensors");
  const io::TensorView* ref = ref_file->find("logits");
  EXPECT_NE(ref, nullptr);
  if (ref == nullptr) return {1.0, 0.0};
  const std::vector<float> got = model::score_all_rows(m, toks, num);
  return compare_logits(got, static_cast<const float*>(ref->data), toks.size(), m.vocab_size());
}

TEST(CudaModel, LogitsAgainstTheFloat64References) {
  PARITY_REQUIRE_GPU();
  for (const char* name : {"mamba2_g1", "mamba2_g2"}) {
    const std::string dir = test::test_data() + "/" + name;
    ASSERT_TRUE(std::filesystem::exists(dir + "/reference_logits.safetensors")) << dir;
    auto cpu = model::load_model(model::open_checkpoint(dir));
    const Accuracy c = against_reference(*cpu, dir, model::default_numerics(*cpu, model::ScanMode::Exact));
    for (bool fp32 : {false, true}) {
      auto m = gpu_model(dir, fp32);
      // Sanitizer mode: one mode a GEMM type, swapped between the two checkpoints (each pair once).
      const bool g1 = std::string(name) == "mamba2_g1";
      for (model::ScanMode mode : test::sweep({model::ScanMode::Exact, model::ScanMode::Plain},
                                              {fp32 == g1 ? model::ScanMode::Exact : model::ScanMode::Plain})) {
        const cache::Numerics num = model::default_numerics(*m, mode);
        const Accuracy a = against_reference(*m, dir, num);
        std::fprintf(stderr, "[ measured ] %s cuda %s %s: relative error %.3g, argmax agreement %.3f (cpu %.3g)\n",
                     name, fp32 ? "float32" : "bfloat16", num.describe().c_str(), a.rel, a.argmax_agree, c.rel);
        EXPECT_GT(a.rel, 0.0);
        if (fp32) {
          EXPECT_LE(a.rel, 10 * c.rel) << name;
        } else {
          // Hugging Face transformers in bf16 on an H200: 1.2e-2 and 9.6e-3, argmax agreeing on 98 %.
          EXPECT_LE(a.rel, 1.2e-2) << name;
          EXPECT_GE(a.argmax_agree, 0.98) << name;
        }
      }
    }
  }
}

// The tensor-core cell walk (ssd_tc.h; --scan-products bfloat16 | split) through a whole model at
// mamba2-130m's shape (N 128, P 64, the GPU's G = 16): one exact prefill, logits against the CPU's (fp32
// throughout) beside those of the default fp32 walk. It measures what bf16 or split products in
// the scan would cost a model's logits (docs/cuda.md, "A tensor-core cell walk"). The bf16 GEMM inputs already
// put the walk's logits 1.3e-2 from the CPU's on this random model (an H100, session 43), so the products are
// held to what they add: bf16 products within 25 % of the walk's error (their rounding is the size of the one
// out_proj applies to y), split products within 10 %, and the argmax as often right as the walk's (to within
// 1 %, or two rows where the sanitizer's run is short).
TEST(CudaModel, ScanProductsOnTensorCoresThroughTheModel) {
  PARITY_REQUIRE_GPU();
  const std::string spec = "builtin:mamba2-130m";
  auto cpu = model::load_model(model::open_checkpoint(spec));
  auto m = gpu_model(spec);
  const int V = m->vocab_size();
  std::vector<int32_t> toks(static_cast<std::size_t>(test::pick(300, 40)));
  for (std::size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7919 + 13) % V);
  const std::vector<float> ref =
      model::score_all_rows(*cpu, toks, model::default_numerics(*cpu, model::ScanMode::Exact));
  const cache::Numerics num = model::default_numerics(*m, model::ScanMode::Exact);
  const std::vector<float> walk = model::score_all_rows(*m, toks, num);
  const Accuracy w = compare_logits(walk, ref.data(), toks.size(), V);
  std::fprintf(stderr, "[ measured ] %s cuda, the fp32 walk: relative error %.3g against the cpu, argmax %.3f\n",
               spec.c_str(), w.rel, w.argmax_agree);
  for (kernels::ScanProducts products : {kernels::ScanProducts::bfloat16, kernels::ScanProducts::split}) {
    const bool split = products == kernels::ScanProducts::split;
    cache::Numerics tc = num;
    tc.grid.products = products;
    const std::vector<float> got = model::score_all_rows(*m, toks, tc);
    const Accuracy a = compare_logits(got, ref.data(), toks.size(), V);
    const Accuracy d = compare_logits(got, walk.data(), toks.size(), V);
    std::fprintf(stderr,
                 "[ measured ] %s cuda, %s products: relative error %.3g against the cpu (argmax %.3f), %.3g "
                 "against the fp32 walk\n",
                 spec.c_str(), split ? "split" : "bf16", a.rel, a.argmax_agree, d.rel);
    // Companion: the grid's products took the tensor-core walk (its products round; the walk's would be equal).
    EXPECT_FALSE(test::same_bits(got.data(), walk.data(), got.size())) << (split ? "split" : "bf16");
    EXPECT_GT(d.rel, 0.0);
    EXPECT_LE(a.rel, (split ? 1.1 : 1.25) * w.rel);
    EXPECT_GE(a.argmax_agree, w.argmax_agree - std::max(0.01, 2.0 / static_cast<double>(toks.size())));
  }
}

// The same products through the exactness gate's schedules: with the one-row decode on the walk's steps
// (ssd_tc_decode.cu) exact mode's rows keep their bits however the model is scheduled, with either product
// precision; plain mode (its chunk scan and SSU, untouched) still mismatches (the companion).
TEST(CudaModel, ExactModeKeepsItsBitsWithTheScanProductsOnTensorCores) {
  PARITY_REQUIRE_GPU();
  auto m = gpu_model("builtin:mamba2-130m");
  for (kernels::ScanProducts products : test::sweep({kernels::ScanProducts::bfloat16, kernels::ScanProducts::split},
                                                    {kernels::ScanProducts::bfloat16})) {
    const test::GateTally t = test::run_gpu_gate(*m, products);
    const char* name = cache::scan_products_name(products);
    EXPECT_GT(t.exact_rows, test::gate_min_rows(1000)) << name;
    EXPECT_EQ(t.exact_bad, 0) << name;
    EXPECT_GT(t.plain_bad, 0) << name << ": companion: plain mode's rows should change with the schedule";
  }
}

class RecordAndZero : public model::ProbeHooks {
 public:
  std::string name;
  bool zero = false;
  int rows = 0, cols = 0;
  double sum_abs = 0;
  bool wants(const std::string& n) const override { return n == name; }
  void visit(const std::string&, float* data, int r, int c, const model::ProbeRows&) override {
    rows += r;
    cols = c;
    for (int i = 0; i < r * c; ++i) sum_abs += std::fabs(data[i]);
    if (zero)
      for (int i = 0; i < r * c; ++i) data[i] = 0.0f;
  }
};

TEST(CudaModel, ProbesCaptureAndReplaceOnTheGpu) {
  PARITY_REQUIRE_GPU();
  auto m = gpu_model("builtin:tiny");
  const std::vector<int32_t> toks = {1, 5, 9, 2, 7, 3};
  const std::vector<float> base = model::score_all_rows(*m, toks, model::ScanMode::Exact);
  RecordAndZero cap;
  cap.name = "backbone.layers.0.mixer";
  const std::vector<float> same = model::score_all_rows(*m, toks, model::ScanMode::Exact, &cap);
  EXPECT_EQ(cap.rows, 6);
  EXPECT_GT(cap.sum_abs, 0.0);
  EXPECT_TRUE(test::same_bits(base.data(), same.data(), base.size())) << "a capture must not change the logits";
  RecordAndZero rep = cap;
  rep.zero = true;
  const std::vector<float> changed = model::score_all_rows(*m, toks, model::ScanMode::Exact, &rep);
  EXPECT_FALSE(test::same_bits(base.data(), changed.data(), base.size()));
}

// A CUDA model's host memory for logits (Model::host_floats, what the engine passes to forward) is
// page-locked, so the logits' copy is a DMA; the same logits land there as in ordinary memory. Companions:
// ordinary memory is not page-locked (the check can tell them apart), and one changed token changes the
// logits the comparison holds equal.
TEST(CudaModel, LogitsLandInPageLockedHostMemory) {
  PARITY_REQUIRE_GPU();
  for (const char* spec : {"builtin:tiny", "builtin:tiny-hybrid"}) {
    auto m = gpu_model(spec);
    const int V = m->vocab_size();
    const std::vector<int32_t> toks = {1, 5, 9, 2, 7, 3};
    model::HostFloats pinned = m->host_floats(toks.size() * static_cast<std::size_t>(V));
    cudaPointerAttributes a{};
    ASSERT_EQ(cudaPointerGetAttributes(&a, pinned.get()), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeHost) << spec;
    std::vector<float> plain(toks.size() * static_cast<std::size_t>(V));
    cudaPointerAttributes b{};
    ASSERT_EQ(cudaPointerGetAttributes(&b, plain.data()), cudaSuccess);
    EXPECT_EQ(b.type, cudaMemoryTypeUnregistered) << "companion: a std::vector is pageable";
    auto run = [&](const std::vector<int32_t>& tokens, float* out) {
      cache::ModelCacheOptions o;
      o.kv_num_blocks = 4;  // the hybrid's attention layers
      cache::ModelCache mc(m->cache_spec(), o);
      const int slot = mc.allocate();
      ASSERT_TRUE(mc.reserve(slot, static_cast<int64_t>(tokens.size())));
      model::ForwardBatch fb;
      fb.tokens = tokens;
      fb.seqs = {{slot, 0, static_cast<int>(tokens.size())}};
      for (int r = 0; r < static_cast<int>(tokens.size()); ++r) fb.logit_rows.push_back(r);
      m->forward(fb, mc, model::ScanMode::Plain, out);
    };
    run(toks, pinned.get());
    run(toks, plain.data());
    EXPECT_TRUE(test::same_bits(pinned.get(), plain.data(), plain.size())) << spec;
    std::vector<int32_t> poked = toks;
    poked[2] += 1;
    run(poked, plain.data());
    EXPECT_FALSE(test::same_bits(pinned.get(), plain.data(), plain.size())) << spec << ": companion, a changed token";
  }
}

// Hybrids load as CudaHybridModel (tests/cuda/cuda_hybrid_model_test.cpp); an exact grid larger
// than the SSD kernels stage on chip is refused with a message, not run, and so are scan products the
// tensor-core walk cannot form for the model (its state of 16 here) or that --dtype float32 rules out.
TEST(CudaModel, RefusesWhatItDoesNotRun) {
  PARITY_REQUIRE_GPU();
  EXPECT_STREQ(gpu_model("builtin:tiny-hybrid")->device(), "cuda");
  auto m = gpu_model("builtin:tiny");
  cache::Numerics num = model::default_numerics(*m, model::ScanMode::Exact);
  num.grid.cell = cuda::kMaxCell * 2;
  EXPECT_THROW(model::score_all_rows(*m, {1, 2, 3}, num), Error);
  const auto refusal = [](const model::Model& on, kernels::ScanProducts products) -> std::string {
    cache::Numerics n = model::default_numerics(on, model::ScanMode::Exact);
    n.grid.products = products;
    try {
      model::stamp_backend(on, n);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal(*m, kernels::ScanProducts::bfloat16).find("state 16"), std::string::npos);
  EXPECT_NE(refusal(*gpu_model("builtin:mamba2-130m", true), kernels::ScanProducts::split).find("--dtype float32"),
            std::string::npos);
  EXPECT_EQ(refusal(*gpu_model("builtin:mamba2-130m"), kernels::ScanProducts::split), "");  // the companion
}

}  // namespace
}  // namespace parity
