// Tensor parallelism on GPUs, end to end (backend_cuda/cuda_tensor_parallel.h): decode tokens/s of a
// 7B-class GraniteMoeHybrid at TP = 1 and TP = 2, batch 1 and 64. The model is granite-h-tiny-g2 (Granite
// 4.0 H Tiny's shape with two Mamba groups: granite-h-tiny's single group cannot be split). On one GPU both
// ranks share GPU 0 and sum through the host-staged collective, so the figure measures the overhead of
// the split (two half-size GEMMs per projection, a host round trip per sum), not a speed-up; on two GPUs
// the ranks sum over NCCL. The ranks run eagerly: TP = 1 is measured eager and with CUDA graphs.
// Registered into parity_gpu_bench beside cuda_bench.cpp.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench_cache.h"
#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "cache/model_cache.h"
#include "kernels_cuda/ops.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace parity {
namespace {

constexpr const char* kTpModel = "builtin:granite-h-tiny-g2";

// TP = 1 and TP = 2 of the same checkpoint, loaded once per process (generating the 7B weights takes a
// while); index tp - 1.
model::Model& tp_model(int tp) {
  static std::unique_ptr<model::Model> m[2];
  if (!m[tp - 1]) {
    static const model::Checkpoint ck = model::open_checkpoint(kTpModel);
    m[tp - 1] = backend_cuda::load_model(ck, tp, {});
    if (tp > 1) std::fprintf(stderr, "%s: %s\n", kTpModel, m[tp - 1]->placement().c_str());
  }
  return *m[tp - 1];
}

// arg0 batch, arg1 0 = plain / 1 = exact, arg2 the TP degree, arg3 1 = CUDA graphs (TP = 1 only), 0 =
// eager. A decode step of `batch` sequences after a 512-token prefill each; the first decode step (a
// graph's capture) is not timed. Tokens/s = batch / step time.
void BM_CudaTpDecode(benchmark::State& state) {
  if (cuda::device_count() == 0) {
    state.SkipWithError("no CUDA device: not run");
    return;
  }
  const int batch = static_cast<int>(state.range(0)), tp = static_cast<int>(state.range(2)), prompt = 512;
  const bool exact = state.range(1) != 0, graphs = state.range(3) != 0;
  model::Model& m = tp_model(tp);
  state.SetLabel(std::string("granite-h-tiny-g2 tp") + std::to_string(tp) + (tp > 1 ? " (" + std::to_string(
      cuda::device_count() >= tp ? tp : cuda::device_count()) + " GPU)" : ""));
  if (tp == 1) backend_cuda::set_enforce_eager(m, !graphs);
  const int64_t steps = 1024;  // >= the iterations below: the reserved KV blocks suffice
  cache::ModelCache mc = bench::bench_cache(m, exact, batch, prompt + steps);
  model::ForwardBatch b;
  for (int s = 0; s < batch; ++s) {
    const int slot = mc.allocate();
    mc.reserve(slot, prompt + steps);
    for (int i = 0; i < prompt; ++i) b.tokens.push_back((s * 31 + i * 7) % m.vocab_size());
    b.seqs.push_back({slot, 0, prompt});
    b.logit_rows.push_back(s * prompt + prompt - 1);
  }
  std::vector<float> logits(std::size_t(batch) * m.vocab_size());
  const model::ScanMode mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  m.forward(b, mc, mode, logits.data());
  int64_t pos = prompt;
  model::ForwardBatch d;
  for (int s = 0; s < batch; ++s) {
    d.tokens.push_back(s + 1);
    d.seqs.push_back({b.seqs[std::size_t(s)].slot, pos, 1});
    d.logit_rows.push_back(s);
  }
  m.forward(d, mc, mode, logits.data());  // warm-up (and a graph's capture)
  ++pos;
  for (auto _ : state) {
    for (auto& q : d.seqs) q.start = pos;
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(d, mc, mode, logits.data());
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ++pos;
  }
  state.SetItemsProcessed(state.iterations() * batch);  // tokens
  if (tp == 1) backend_cuda::set_enforce_eager(m, false);
}
BENCHMARK(BM_CudaTpDecode)
    ->ArgsProduct({{1, 64}, {0, 1}, {1, 2}, {0}})
    ->ArgsProduct({{1, 64}, {0, 1}, {1}, {1}})
    ->ArgNames({"batch", "exact", "tp", "graphs"})
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace parity
