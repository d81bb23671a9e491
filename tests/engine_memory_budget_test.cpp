// The caches' memory budget: --state-memory-mb as given, or a share of a GPU's memory
// (--gpu-memory-utilization, engine/memory_budget.h), which the planner then fills; and the host's
// KV cache holding tables only for a model that keeps K and V on the device.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "cache/kv_cache.h"
#include "common/error.h"
#include "cache/planner.h"
#include "engine/engine.h"
#include "engine/memory_budget.h"
#include "model/model.h"
#include "test_support.h"

namespace parity {
namespace {

constexpr std::size_t kGiB = std::size_t(1) << 30;

// A CPU model that reports a device's memory, as a model on a GPU does.
class ReportsDeviceMemory : public model::Model {
 public:
  ReportsDeviceMemory(const model::Model& inner, model::DeviceMemory dm) : inner_(inner), dm_(dm) {}
  const std::string& architecture() const override { return inner_.architecture(); }
  const std::string& origin() const override { return inner_.origin(); }
  int vocab_size() const override { return inner_.vocab_size(); }
  const cache::ModelCacheSpec& cache_spec() const override { return inner_.cache_spec(); }
  std::vector<model::ProbePoint> probe_points() const override { return inner_.probe_points(); }
  void forward(const model::ForwardBatch& b, cache::ModelCache& c, model::ScanMode mode, float* logits,
               model::ProbeHooks* hooks) const override {
    inner_.forward(b, c, mode, logits, hooks);
  }
  std::optional<model::DeviceMemory> device_memory() const override { return dm_; }

 private:
  const model::Model& inner_;
  model::DeviceMemory dm_;
};

TEST(MemoryBudget, AShareOfTheDeviceIsWhatIsFreeMinusTheRestOfTheTotal) {
  const ReportsDeviceMemory gpu(test::tiny_hybrid_model(), {3 * kGiB, 4 * kGiB});
  EXPECT_EQ(engine::cache_budget(gpu, 0, 0.0), 0u);
  EXPECT_EQ(engine::cache_budget(gpu, 12345, 0.0), 12345u);
  EXPECT_EQ(engine::cache_budget(gpu, 0, 0.75), 2 * kGiB);  // 3 GiB free - 0.25 · 4 GiB
  EXPECT_EQ(engine::cache_budget(gpu, 0, 1.0), 3 * kGiB);
}

TEST(MemoryBudget, TheEnginePlansItsCachesFromTheDeviceShare) {
  const ReportsDeviceMemory gpu(test::tiny_hybrid_model(), {kGiB / 4, kGiB / 2});
  engine::EngineConfig cfg;
  cfg.sched.max_num_seqs = 4;
  cfg.gpu_memory_utilization = 0.6;  // 256 MiB free - 0.4 · 512 MiB = 51.2 MiB
  engine::Engine eng(gpu, cfg);
  const std::size_t budget = kGiB / 4 - static_cast<std::size_t>(0.4 * double(kGiB / 2));
  const cache::CachePlan& p = eng.plan();
  EXPECT_EQ(p.num_slots, 4);
  EXPECT_LE(p.total_bytes(), budget);
  // The KV pool takes what the states leave: within one block of the budget, far past the
  // per-slot default the engine plans without a budget.
  EXPECT_GT(p.total_bytes() + p.kv_per_token * std::size_t(p.kv_block_size), budget);
  engine::EngineConfig plain = cfg;
  plain.gpu_memory_utilization = 0;
  engine::Engine without(gpu, plain);
  EXPECT_GT(p.kv_num_blocks, without.plan().kv_num_blocks);
  // The engine runs on the plan.
  engine::RequestSpec r;
  r.prompt = {1, 2, 3, 4, 5};
  r.sampling.max_tokens = 3;
  const uint64_t id = eng.add_request(r);
  auto res = eng.run_to_completion();
  EXPECT_EQ(res[id].tokens.size(), 3u);
}

TEST(MemoryBudget, ErrorsNameTheProblem) {
  const ReportsDeviceMemory gpu(test::tiny_hybrid_model(), {kGiB, 4 * kGiB});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              engine::cache_budget(test::tiny_hybrid_model(), 0, 0.9);
            }).find("runs on cpu (use --state-memory-mb)"),
            std::string::npos);
  EXPECT_NE(message([&] { engine::cache_budget(gpu, 0, 1.5); }).find("must be in (0, 1]"), std::string::npos);
  EXPECT_NE(message([&] { engine::cache_budget(gpu, 0, -0.1); }).find("must be in (0, 1]"), std::string::npos);
  EXPECT_NE(message([&] { engine::cache_budget(gpu, 100, 0.9); }).find("not both"), std::string::npos);
  // 1 GiB free, 0.5 · 4 GiB to keep free: nothing left.
  const std::string none = message([&] { engine::cache_budget(gpu, 0, 0.5); });
  EXPECT_NE(none.find("leaves no memory"), std::string::npos) << none;
  EXPECT_NE(none.find("1.00 GiB free of 4.00 GiB"), std::string::npos) << none;
  engine::EngineConfig cfg;
  cfg.gpu_memory_utilization = 0.9;
  EXPECT_THROW(engine::Engine(test::tiny_hybrid_model(), cfg), Error);
}

TEST(KvCacheTables, WithoutValuesTheTablesWorkAndNoMemoryIsHeld) {
  const kernels::KvLayout layout{2, 16, 16};
  cache::KvCache with(3, layout, 8, 2), tables(3, layout, 8, 2, false);
  EXPECT_NE(with.k(0), nullptr);
  EXPECT_EQ(tables.k(0), nullptr);
  EXPECT_EQ(tables.v(2), nullptr);
  for (cache::KvCache* kv : {&with, &tables}) {
    ASSERT_TRUE(kv->reserve(0, 40));  // 3 blocks
    ASSERT_TRUE(kv->reserve(1, 70));  // 5 blocks
    EXPECT_FALSE(kv->reserve(0, 60));  // a 4th block for slot 0: none left
    EXPECT_EQ(kv->num_free_blocks(), 0);
    kv->clear_positions(0, 0, 40);  // no values to clear in the tables-only cache
    kv->release(1);
    EXPECT_EQ(kv->num_free_blocks(), 5);
  }
  // Both hand out the same blocks: the device's arrays are addressed as the host's would be.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(with.block_table(0)[i], tables.block_table(0)[i]);
}

}  // namespace
}  // namespace parity
