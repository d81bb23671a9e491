// The step profile (backend_cuda/step_profile.h): attached, every pass runs eagerly and is timed by
// part, and no logit changes (events only mark the stream); each kind of work of a hybrid pass gets
// time; detached, decode steps replay graphs again. Companion: the profile's attribution follows the
// marks, so a model without attention layers (Mamba2) leaves the attention parts at zero.
#include <string>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "backend_cuda/step_profile.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

using backend_cuda::StepPart;

// Every logit row of a prompt of 12 tokens and 8 teacher-forced decode steps (1 in sanitizer mode, a
// graph captured and replayed), exact mode.
std::vector<float> engine_rows(const model::Model& m) {
  std::vector<int32_t> toks;
  for (int i = 0; i < test::pick(20, 13); ++i) toks.push_back((i * 37 + 5) % m.vocab_size());
  engine::EngineConfig cfg;
  cfg.mode = model::ScanMode::Exact;
  engine::RequestSpec req;
  req.prompt.assign(toks.begin(), toks.begin() + 12);
  req.forced.assign(toks.begin() + 12, toks.end());
  req.return_logits = true;
  req.return_prompt_logits = true;
  engine::Engine eng(m, cfg);
  const uint64_t id = eng.add_request(req);
  auto res = eng.run_to_completion();
  std::vector<float> out;
  for (const auto& r : res.at(id).logit_rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

TEST(CudaStepProfile, TimesEveryPartOfAHybridPassAndChangesNoBit) {
  PARITY_REQUIRE_GPU();
  auto m = backend_cuda::load_model(model::open_checkpoint("builtin:tiny-hybrid"));
  const std::vector<float> base = engine_rows(*m);
  const int64_t replays0 = backend_cuda::cuda_graph_stats(*m).replays;
  ASSERT_GT(replays0, 0) << "unprofiled decode steps replay graphs";

  backend_cuda::StepProfile p;
  backend_cuda::set_step_profile(*m, &p);
  const std::vector<float> timed = engine_rows(*m);
  backend_cuda::set_step_profile(*m, nullptr);
  EXPECT_EQ(backend_cuda::cuda_graph_stats(*m).replays, replays0) << "a profiled pass runs eagerly";
  ASSERT_EQ(timed.size(), base.size());
  for (std::size_t i = 0; i < base.size(); ++i)
    ASSERT_TRUE(test::same_bits(&timed[i], &base[i], 1)) << "row value " << i << ": " << timed[i] << " vs " << base[i];
  EXPECT_GT(p.passes(), 1) << "the prefill and the decode steps";
  double sum = 0;
  for (int k = 0; k < backend_cuda::kNumStepParts; ++k) {
    const auto part = static_cast<StepPart>(k);
    EXPECT_GT(p.seconds(part), 0.0) << backend_cuda::step_part_name(part);
    sum += p.seconds(part);
  }
  EXPECT_DOUBLE_EQ(sum, p.total_seconds());

  // Detached: decode replays graphs again.
  engine_rows(*m);
  EXPECT_GT(backend_cuda::cuda_graph_stats(*m).replays, replays0);
}

TEST(CudaStepProfile, CompanionAMamba2PassHasNoAttentionOrMoeTime) {
  PARITY_REQUIRE_GPU();
  auto m = backend_cuda::load_model(model::open_checkpoint("builtin:tiny"));
  backend_cuda::StepProfile p;
  backend_cuda::set_step_profile(*m, &p);
  engine_rows(*m);
  backend_cuda::set_step_profile(*m, nullptr);
  EXPECT_GT(p.seconds(StepPart::MambaSsd), 0.0);
  EXPECT_GT(p.seconds(StepPart::Other), 0.0);
  for (StepPart q : {StepPart::AttnProj, StepPart::AttnCore, StepPart::Moe, StepPart::SharedMlp})
    EXPECT_EQ(p.seconds(q), 0.0) << backend_cuda::step_part_name(q);
}

}  // namespace
}  // namespace parity
