// GPU benchmarks of the hybrid kernels (Google Benchmark, manual time from CUDA events): paged
// attention decode over long contexts and prefill, and the MoE block, at a Granite-4.0-H-like
// shape (32 query heads, 8 kv heads, head_dim 128; 64 experts, top-6, hidden 1536, width 512).
// Registered into parity_gpu_bench beside cuda_bench.cpp.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "cache/model_cache.h"
#include "common/dtype.h"
#include "kernels_cuda/attention.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/moe.h"
#include "kernels_cuda/pass_plan.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace parity {
namespace {

constexpr int NQ = 32, NKV = 8, HD = 128, BS = 64;

std::vector<float> rnd(std::size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Elapsed stream time of one timed region, in seconds.
struct EventTimer {
  cudaEvent_t a, b;
  EventTimer() {
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
  ~EventTimer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  void start() { cudaEventRecord(a); }
  double stop_s() {
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms / 1000.0;
  }
};

bool gpu_or_skip(benchmark::State& state) {
  if (cuda::device_count() > 0) return true;
  state.SkipWithError("no CUDA device: not run");
  return false;
}

// `seqs` sequences whose keys 0..ctx-1 are in a paged cache; a pass of `rows` query rows each at
// the end of the context (rows = 1: decode; rows = ctx: a whole prefill).
struct AttnBench {
  kernels::KvLayout L{NKV, HD, BS};
  int seqs, ctx, rows;
  cuda::DeviceBuffer<float> kc, vc, q, out;
  cuda::DeviceBuffer<int32_t> ints, tables, work_buf;
  cuda::DeviceBuffer<int64_t> starts;
  cuda::DeviceBuffer<float> scratch;
  cuda::PassSeqs ps;
  cuda::KvTables kt;
  cuda::AttnWork work;
  AttnBench(int s, int c, int r, bool plan = true) : seqs(s), ctx(c), rows(r) {
    const int per = (ctx + BS - 1) / BS;
    const std::size_t blocks = std::size_t(seqs) * per;
    kc.upload(rnd(blocks * L.block_floats(), 1, -1, 1));
    vc.upload(rnd(blocks * L.block_floats(), 2, -1, 1));
    q.upload(rnd(std::size_t(seqs) * rows * NQ * HD, 3, -1, 1));
    out.resize(std::size_t(seqs) * rows * NQ * HD);
    std::vector<int32_t> tab(blocks);
    for (std::size_t i = 0; i < blocks; ++i) tab[i] = static_cast<int32_t>(i);
    tables.upload(tab);
    kt = {tables.data(), per};
    std::vector<cuda::SeqSpan> spans;
    for (int i = 0; i < seqs; ++i) spans.push_back({i, int64_t(ctx) - rows, rows});
    ps = cuda::PassPlan(spans, cuda::ScanGrid{}).upload(ints, starts);
    if (plan) work = cuda::AttnPlan(spans, NQ).upload(work_buf, scratch);
  }
  void run() {
    cuda::attention(L, NQ, 0.088f, q.data(), NQ * HD, ps, kt, kc.data(), vc.data(), out.data(), NQ * HD, nullptr,
                    work);
  }
};

// One decode step of one attention layer: batch × 1 row at context ctx. arg2: 0 = the pass's
// AttnPlan (few long rows take the split kernels, many the row kernel), 1 = the row kernel only.
void BM_CudaAttentionDecode(benchmark::State& state) {
  if (!gpu_or_skip(state)) return;
  AttnBench b(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 1, state.range(2) == 0);
  b.run();
  EventTimer t;
  for (auto _ : state) {
    t.start();
    b.run();
    state.SetIterationTime(t.stop_s());
  }
  // K and V bytes read per step: the bandwidth floor.
  state.SetBytesProcessed(state.iterations() * b.seqs * int64_t(b.ctx) * 2 * NKV * HD * 4);
}
BENCHMARK(BM_CudaAttentionDecode)
    ->ArgsProduct({{1, 8, 64}, {1024, 8192, 32768}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// A whole prefill of ctx tokens of one sequence (one layer).
void BM_CudaAttentionPrefill(benchmark::State& state) {
  if (!gpu_or_skip(state)) return;
  const int ctx = static_cast<int>(state.range(0));
  AttnBench b(1, ctx, ctx);
  b.run();
  EventTimer t;
  for (auto _ : state) {
    t.start();
    b.run();
    state.SetIterationTime(t.stop_s());
  }
  state.counters["TFLOPs"] = benchmark::Counter(2.0 * 2.0 * NQ * HD * (double(ctx) * ctx / 2) * state.iterations() / 1e12,
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CudaAttentionPrefill)->Arg(512)->Arg(2048)->Arg(8192)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The sparse MoE block (router logits given) for T tokens, bf16 weights.
void BM_CudaMoe(benchmark::State& state) {
  if (!gpu_or_skip(state)) return;
  constexpr int E = 64, K = 6, D = 1536, F = 512;
  const int T = static_cast<int>(state.range(0));
  auto bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> o(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
    return o;
  };
  cuda::DeviceBuffer<uint16_t> w_in, w_out;
  w_in.upload(bf16(rnd(std::size_t(E) * 2 * F * D, 4, -0.03f, 0.03f)));
  w_out.upload(bf16(rnd(std::size_t(E) * D * F, 5, -0.04f, 0.04f)));
  cuda::DeviceBuffer<float> x, logits, gates(std::size_t(T) * K), out(std::size_t(T) * D);
  cuda::DeviceBuffer<int32_t> idx(std::size_t(T) * K);
  x.upload(rnd(std::size_t(T) * D, 6, -1, 1));
  logits.upload(rnd(std::size_t(T) * E, 7, -2, 2));
  const cuda::MoeWeights w{w_in.data(), w_out.data(), cuda::WeightType::BF16, E, D, F};
  cuda::MoeWorkspace ws;
  auto run = [&] {
    cuda::router_topk_softmax(logits.data(), T, E, K, idx.data(), gates.data(), nullptr);
    cuda::moe_experts(w, x.data(), T, K, idx.data(), gates.data(), ws, out.data(), nullptr);
  };
  run();
  EventTimer t;
  for (auto _ : state) {
    t.start();
    run();
    state.SetIterationTime(t.stop_s());
  }
  state.SetItemsProcessed(state.iterations() * T);
}
BENCHMARK(BM_CudaMoe)->Arg(1)->Arg(64)->Arg(512)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);

// End to end on a built-in hybrid (loaded once per process, bf16 GEMM inputs): granite-h-bench (16 layers,
// hidden 768) and granite-h-tiny (Granite 4.0 H Tiny's shape: 7B parameters, 1B active). Wall time of
// Model::forward (its logits copy synchronises), launch overhead included.
const char* const kHybridModels[] = {"granite-h-bench", "granite-h-tiny"};

model::Model& hybrid_model(int which) {
  static std::unique_ptr<model::Model> m[2];
  if (!m[which]) m[which] = backend_cuda::load_model(model::open_checkpoint(std::string("builtin:") + kHybridModels[which]));
  return *m[which];
}

cache::ModelCache hybrid_cache(const model::Model& m, bool exact, int slots, int64_t tokens) {
  const cache::Numerics num = model::default_numerics(m, exact ? model::ScanMode::Exact : model::ScanMode::Plain);
  cache::ModelCacheOptions o;
  o.mamba.num_slots = slots;
  o.mamba.exact = num.exact;
  o.mamba.grid = num.grid;
  o.mamba.ssm_dtype = num.ssm_dtype;
  o.kv_block_size = 16;
  o.kv_num_blocks = static_cast<int>(slots * ((tokens + 15) / 16));
  return cache::ModelCache(m.cache_spec(), o);
}

// arg0 batch, arg1 0 = plain / 1 = exact, arg2 the model (kHybridModels), arg3 1 = CUDA graphs (the
// default), 0 = eager (--enforce-eager). A decode step of `batch` sequences after a 512-token prefill
// each; the first decode step (the graph's capture) is not timed.
void BM_CudaHybridDecode(benchmark::State& state) {
  if (!gpu_or_skip(state)) return;
  model::Model& m = hybrid_model(static_cast<int>(state.range(2)));
  state.SetLabel(kHybridModels[state.range(2)]);
  backend_cuda::set_enforce_eager(m, state.range(3) == 0);
  const int batch = static_cast<int>(state.range(0)), prompt = 512;
  const bool exact = state.range(1) != 0;
  const int64_t steps = 1024;  // >= the iterations below: the reserved KV blocks suffice
  cache::ModelCache mc = hybrid_cache(m, exact, batch, prompt + steps);
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
  m.forward(d, mc, mode, logits.data());  // warm-up: captures the bucket's graph
  ++pos;
  for (auto _ : state) {
    for (auto& q : d.seqs) q.start = pos;
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(d, mc, mode, logits.data());
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ++pos;
  }
  state.SetItemsProcessed(state.iterations() * batch);  // tokens
  backend_cuda::set_enforce_eager(m, false);
}
BENCHMARK(BM_CudaHybridDecode)
    ->ArgsProduct({{1, 64}, {0, 1}, {0}, {0, 1}})
    ->ArgsProduct({{1, 64, 256}, {0, 1}, {1}, {0, 1}})
    ->ArgNames({"batch", "exact", "model", "graphs"})
    ->Iterations(200)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Prefill: arg0 sequences of arg1 tokens each in one pass, arg2 0 = plain / 1 = exact, on granite-h-tiny.
// Fresh slots every iteration (the state restarts), tokens/s counted.
void BM_CudaHybridPrefill(benchmark::State& state) {
  if (!gpu_or_skip(state)) return;
  const model::Model& m = hybrid_model(1);
  const int seqs = static_cast<int>(state.range(0)), len = static_cast<int>(state.range(1));
  const bool exact = state.range(2) != 0;
  const model::ScanMode mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  std::vector<float> logits(std::size_t(seqs) * m.vocab_size());
  for (auto _ : state) {
    state.PauseTiming();
    cache::ModelCache mc = hybrid_cache(m, exact, seqs, len);
    model::ForwardBatch b;
    for (int s = 0; s < seqs; ++s) {
      const int slot = mc.allocate();
      mc.reserve(slot, len);
      for (int i = 0; i < len; ++i) b.tokens.push_back((s * 31 + i * 7) % m.vocab_size());
      b.seqs.push_back({slot, 0, len});
      b.logit_rows.push_back(s * len + len - 1);
    }
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(b, mc, mode, logits.data());
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.SetItemsProcessed(state.iterations() * int64_t(seqs) * len);  // tokens
}
BENCHMARK(BM_CudaHybridPrefill)
    ->ArgsProduct({{1, 8}, {2048}, {0, 1}})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace parity
