#include "big_model.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "backend_cuda/backend.h"
#include "bench_cache.h"
#include "model/checkpoint.h"

namespace parity::bench {

model::Model& mamba2_2p7b() {
  static std::unique_ptr<model::Model> m = backend_cuda::load_model(model::open_checkpoint("builtin:mamba2-2.7b"));
  return *m;
}

DecodeRun prepare_decode(model::Model& m, bool exact, int batch, std::optional<DType> ssm_dtype, bool pinned,
                         kernels::ScanProducts products) {
  const std::size_t n = std::size_t(batch) * m.vocab_size();
  DecodeRun r{bench_cache(m, exact, batch, 0, ssm_dtype, products), {},
              pinned ? m.host_floats(n) : model::HostFloats(new float[n](), [](float* p) { delete[] p; }),
              exact ? model::ScanMode::Exact : model::ScanMode::Plain, 16};
  model::ForwardBatch b;
  for (int s = 0; s < batch; ++s) {
    r.mc.allocate();
    for (int i = 0; i < 16; ++i) b.tokens.push_back((s * 31 + i * 7) % 50000);
    b.seqs.push_back({s, 0, 16});
    b.logit_rows.push_back(s * 16 + 15);
  }
  m.forward(b, r.mc, r.mode, r.logits.get());
  for (int s = 0; s < batch; ++s) {
    r.d.tokens.push_back(s + 1);
    r.d.seqs.push_back({s, r.pos, 1});
    r.d.logit_rows.push_back(s);
  }
  m.forward(r.d, r.mc, r.mode, r.logits.get());  // warm-up: captures the bucket's graph
  ++r.pos;
  return r;
}

double time_decode_steps(benchmark::State& state, model::Model& m, DecodeRun& run) {
  double total = 0;
  for (auto _ : state) {
    for (auto& q : run.d.seqs) q.start = run.pos;
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(run.d, run.mc, run.mode, run.logits.get());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
    ++run.pos;
  }
  return total / static_cast<double>(std::max<int64_t>(1, state.iterations()));
}

}  // namespace parity::bench
