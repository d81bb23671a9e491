#pragma once
// The schedule the model-level GPU tests run (cuda_graph_test.cpp, cuda_fused_model_test.cpp): one
// prefill of `batch` prompts of different lengths (so the rows sit at different places of the exact
// grid's cell), then `steps` decode steps of the whole batch, on a cache of the mode's default
// numerics with KV blocks for the hybrid models. Each test supplies its prompts and tokens.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "cache/model_cache.h"
#include "common/dtype.h"
#include "model/model.h"
#include "model/probe.h"

namespace parity::test {

struct Schedule {
  int batch = 1, steps = 1;
  int (*prompt_len)(int seq) = nullptr;
  // Sequence seq's token i: the prompt's for i < prompt_len(seq); decode step k's is token(seq, step_base + k).
  int32_t (*token)(int seq, int i, int V) = nullptr;
  int step_base = 100;
  int poke_seq = -1, poke_step = 1;  // that step's token of that sequence moved by one (a companion's change)
  bool reverse_odd_steps = false;    // odd steps ask for the logit rows in reverse order
  std::optional<DType> state_dtype;  // the SSM state's dtype (none: the mode's default)
};

// A (mode, batch) pair a model-level test runs, with the indices of the test's variants (flag sets,
// launch settings) it compares there against the pair's reference run.
struct ModeCase {
  bool exact;
  int batch;
  std::vector<int> variants;
};

// A normal run's sweep: both modes × `batches`, every one of `variants` variants on each pair. Sanitizer
// mode (a pass of builtin:tiny-hybrid costs ~2 s under racecheck) names its own few pairs, each variant on
// one of them.
inline std::vector<ModeCase> every_mode_case(std::initializer_list<int> batches, int variants) {
  std::vector<int> all;
  for (int v = 0; v < variants; ++v) all.push_back(v);
  std::vector<ModeCase> c;
  for (bool exact : {true, false})
    for (int b : batches) c.push_back({exact, b, all});
  return c;
}

struct ScheduleRun {
  std::vector<float> prefill;             // [batch][V]: each prompt's last row
  std::vector<float> decode;              // [steps][batch][V], by sequence whatever order the rows were asked in
  std::vector<std::vector<int32_t>> fed;  // each sequence's tokens: prompt, then one per step
  std::vector<int> prompt_len;
  const float* row(int step, int seq, int V) const {
    return decode.data() + (static_cast<std::size_t>(step) * prompt_len.size() + seq) * V;
  }
  std::vector<float> all() const {  // prefill rows, then each step's
    std::vector<float> v = prefill;
    v.insert(v.end(), decode.begin(), decode.end());
    return v;
  }
};

inline ScheduleRun run_schedule(const model::Model& m, bool exact, const Schedule& sc,
                                model::ProbeHooks* hooks = nullptr) {
  const model::ScanMode mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  const cache::Numerics num = model::default_numerics(m, mode);
  const int V = m.vocab_size(), batch = sc.batch, max_len = 40 + sc.steps;
  cache::ModelCacheOptions o;
  o.mamba.num_slots = batch;
  o.mamba.exact = num.exact;
  o.mamba.grid = num.grid;
  o.mamba.ssm_dtype = sc.state_dtype.value_or(num.ssm_dtype);
  o.kv_block_size = 16;
  o.kv_num_blocks = batch * ((max_len + 15) / 16);
  cache::ModelCache mc(m.cache_spec(), o);

  ScheduleRun out;
  out.fed.resize(static_cast<std::size_t>(batch));
  model::ForwardBatch p;
  std::vector<int> slots;
  for (int s = 0; s < batch; ++s) {
    const int slot = mc.allocate();
    EXPECT_TRUE(mc.reserve(slot, max_len));
    slots.push_back(slot);
    const int len = sc.prompt_len(s);
    out.prompt_len.push_back(len);
    for (int i = 0; i < len; ++i) out.fed[s].push_back(sc.token(s, i, V));
    p.tokens.insert(p.tokens.end(), out.fed[s].begin(), out.fed[s].end());
    p.seqs.push_back({slot, 0, len});
    p.logit_rows.push_back(static_cast<int>(p.tokens.size()) - 1);
  }
  out.prefill.resize(static_cast<std::size_t>(batch) * V);
  m.forward(p, mc, mode, out.prefill.data(), hooks);

  out.decode.resize(static_cast<std::size_t>(sc.steps) * batch * V);
  std::vector<float> l(static_cast<std::size_t>(batch) * V);
  for (int k = 0; k < sc.steps; ++k) {
    model::ForwardBatch d;
    for (int s = 0; s < batch; ++s) {
      int32_t t = sc.token(s, sc.step_base + k, V);
      if (s == sc.poke_seq && k == sc.poke_step) t = (t + 1) % V;
      d.tokens.push_back(t);
      d.seqs.push_back({slots[s], static_cast<int64_t>(out.fed[s].size()), 1});
      out.fed[s].push_back(t);
    }
    for (int s = 0; s < batch; ++s) d.logit_rows.push_back(sc.reverse_odd_steps && k % 2 ? batch - 1 - s : s);
    m.forward(d, mc, mode, l.data(), hooks);
    for (int i = 0; i < batch; ++i) {
      const int s = d.logit_rows[static_cast<std::size_t>(i)];
      std::copy_n(l.data() + static_cast<std::size_t>(i) * V, V,
                  out.decode.data() + (static_cast<std::size_t>(k) * batch + s) * V);
    }
  }
  return out;
}

}  // namespace parity::test
