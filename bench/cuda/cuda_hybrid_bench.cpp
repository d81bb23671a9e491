// GPU benchmarks of the hybrid kernels (Google Benchmark, manual time from CUDA events): paged
// attention decode over long contexts and prefill, and the MoE block, at a Granite-4.0-H-like
// shape (32 query heads, 8 kv heads, head_dim 128; 64 experts, top-6, hidden 1536, width 512).
// Registered into parity_gpu_bench beside cuda_bench.cpp.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "backend_cuda/step_profile.h"
#include "bench_cache.h"
#include "step_shares.h"
#include "cache/model_cache.h"
#include "common/dtype.h"
#include "kernels_cuda/attention.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_swap_ab.h"
#include "kernels_cuda/moe.h"
#include "kernels_cuda/ops.h"
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

// A large batch's prefill runs in passes of at most this many tokens (whole sequences), as an engine's
// token budget would split it; it also bounds a pass's activations (the MoE's grouped rows, the SSD's
// cell states) to a few GB, so 256 sequences fit beside their state and KV.
constexpr int kPrefillPassTokens = 16384;

// Prompts of `len` tokens into `slots` (fresh, each reserved for at least len tokens), in passes of
// at most kPrefillPassTokens tokens; the last row's logits of each. Returns the wall seconds.
double prefill(const model::Model& m, cache::ModelCache& mc, model::ScanMode mode, const std::vector<int>& slots,
               int len) {
  const int per_pass = std::max(1, kPrefillPassTokens / len);
  std::vector<float> logits(std::size_t(per_pass) * m.vocab_size());
  double seconds = 0;
  for (std::size_t first = 0; first < slots.size(); first += std::size_t(per_pass)) {
    model::ForwardBatch b;
    const std::size_t last = std::min(slots.size(), first + std::size_t(per_pass));
    for (std::size_t s = first; s < last; ++s) {
      for (int i = 0; i < len; ++i)
        b.tokens.push_back(static_cast<int32_t>((s * 31 + std::size_t(i) * 7) % std::size_t(m.vocab_size())));
      b.seqs.push_back({slots[s], 0, len});
      b.logit_rows.push_back(static_cast<int>(b.tokens.size()) - 1);
    }
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(b, mc, mode, logits.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return seconds;
}

// One short prefill in a throwaway cache: the first launch of each kernel (lazy module loading) is
// not in a timed pass.
void warm_up(const model::Model& m, bool exact) {
  cache::ModelCache mc = bench::bench_cache(m, exact, 1, 64);
  const int slot = mc.allocate();
  mc.reserve(slot, 64);
  prefill(m, mc, exact ? model::ScanMode::Exact : model::ScanMode::Plain, {slot}, 32);
}

double gpu_used_gb(const model::Model& m) {
  const std::optional<model::DeviceMemory> d = m.device_memory();
  return d ? static_cast<double>(d->total_bytes - d->free_bytes) / (1024.0 * 1024.0 * 1024.0) : 0.0;
}

// Eager decode steps profiled after a benchmark's timed ones: where a step's time goes.
constexpr int kProfiledSteps = 5;

// arg0 batch, arg1 0 = plain / 1 = exact, arg2 the model (kHybridModels), arg3 1 = CUDA graphs (the
// default), 0 = eager (--enforce-eager), arg4 the decode GEMMs' set_gemm_early word (ops.h,
// gemm_swap_ab.h). `batch` sequences get a 512-token prompt each (prefill_tok_s:
// those batch × 512 tokens in passes of up to kPrefillPassTokens, timed once), then decode steps of
// one token per sequence (decode_tok_s; the first step, the graph's capture, is not timed). Then
// kProfiledSteps eager steps with a StepProfile: attn_pct, moe_pct, mlp_pct, mamba_pct (and its
// split), other_pct of a decode step (step_shares.h). gpu_used_gb: device memory in use after the
// prefill (weights, state and KV of the batch, scratch).
void BM_CudaHybridDecode(benchmark::State& state) {
  if (!gpu_or_skip(state)) return;
  model::Model& m = hybrid_model(static_cast<int>(state.range(2)));
  state.SetLabel(kHybridModels[state.range(2)]);
  const int batch = static_cast<int>(state.range(0)), prompt = 512;
  const bool exact = state.range(1) != 0;
  const model::ScanMode mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  backend_cuda::set_enforce_eager(m, state.range(3) == 0);
  cuda::set_gemm_early(static_cast<unsigned>(state.range(4)));
  warm_up(m, exact);
  const int64_t steps = 1024;  // >= the iterations and profiled steps below: the reserved KV blocks suffice
  cache::ModelCache mc = bench::bench_cache(m, exact, batch, prompt + steps);
  std::vector<int> slots;
  for (int s = 0; s < batch; ++s) {
    slots.push_back(mc.allocate());
    mc.reserve(slots.back(), prompt + steps);
  }
  const double prefill_s = prefill(m, mc, mode, slots, prompt);
  const double used_gb = gpu_used_gb(m);
  // The engine's logits memory (page-locked: the copy is a DMA, as in a served step).
  const model::HostFloats logits = m.host_floats(std::size_t(batch) * m.vocab_size());
  int64_t pos = prompt;
  model::ForwardBatch d;
  for (int s = 0; s < batch; ++s) {
    d.tokens.push_back(s + 1);
    d.seqs.push_back({slots[std::size_t(s)], pos, 1});
    d.logit_rows.push_back(s);
  }
  m.forward(d, mc, mode, logits.get());  // warm-up: captures the bucket's graph
  ++pos;
  const int64_t replays0 = backend_cuda::cuda_graph_stats(m).replays;
  double decode_s = 0;
  for (auto _ : state) {
    for (auto& q : d.seqs) q.start = pos;
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(d, mc, mode, logits.get());
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(t);
    decode_s += t;
    ++pos;
  }
  const int64_t iters = state.iterations();
  state.SetItemsProcessed(iters * batch);  // tokens
  state.counters["prefill_tok_s"] = double(batch) * prompt / prefill_s;
  state.counters["decode_tok_s"] = decode_s > 0 ? double(batch) * double(iters) / decode_s : 0.0;
  state.counters["graph"] = static_cast<double>(backend_cuda::cuda_graph_stats(m).replays - replays0) /
                            static_cast<double>(std::max<int64_t>(1, iters));
  state.counters["gpu_used_gb"] = used_gb;
  backend_cuda::StepProfile prof;
  backend_cuda::set_step_profile(m, &prof);
  for (int k = 0; k < kProfiledSteps; ++k, ++pos) {
    for (auto& q : d.seqs) q.start = pos;
    m.forward(d, mc, mode, logits.get());
  }
  backend_cuda::set_step_profile(m, nullptr);
  bench::report_step_shares(state, prof);
  backend_cuda::set_enforce_eager(m, false);
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
}
// The table (granite-h-tiny, graphs on, batch 1 / 64 / 256, plain and exact) is the model:1,graphs:1
// rows; eager rows at 1 and 64 show what graphs save; granite-h-bench at 1 and 64.
BENCHMARK(BM_CudaHybridDecode)
    ->ArgsProduct({{1, 64}, {0, 1}, {0}, {0, 1}, {cuda::kGemmEarlyDefault}})
    ->ArgsProduct({{1, 64}, {0, 1}, {1}, {1, 0}, {cuda::kGemmEarlyDefault}})
    // Session 39: the decode GEMMs' 33-64 rows on c64-2blk, as before the row warps (gemm_swap_ab.h).
    ->ArgsProduct({{48, 64}, {0, 1}, {0, 1}, {1}, {cuda::kGemmEarlyDefault | cuda::kGemmWgmmaFrom33Rows}})
    ->ArgsProduct({{48}, {0, 1}, {0, 1}, {1}, {cuda::kGemmEarlyDefault}})
    ->ArgNames({"batch", "exact", "model", "graphs", "gemm"})
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// Batch 256: fewer steps (each is tens of ms; its prefill of 131,072 tokens dominates the row's time).
BENCHMARK(BM_CudaHybridDecode)
    ->ArgsProduct({{256}, {0, 1}, {1}, {1}, {cuda::kGemmEarlyDefault}})
    ->ArgNames({"batch", "exact", "model", "graphs", "gemm"})
    ->Iterations(30)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Prefill: arg0 sequences of arg1 tokens each in one pass, arg2 0 = plain / 1 = exact, on granite-h-tiny.
// Fresh slots every iteration (the state restarts), tokens/s counted; then one more pass with a
// StepProfile: attn_pct, moe_pct, mlp_pct, mamba_pct (and its split), other_pct of a prefill pass.
void BM_CudaHybridPrefill(benchmark::State& state) {
  if (!gpu_or_skip(state)) return;
  model::Model& m = hybrid_model(1);
  const int seqs = static_cast<int>(state.range(0)), len = static_cast<int>(state.range(1));
  const bool exact = state.range(2) != 0;
  const model::ScanMode mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  warm_up(m, exact);
  auto fresh = [&](cache::ModelCache& mc) {
    std::vector<int> slots;
    for (int s = 0; s < seqs; ++s) {
      slots.push_back(mc.allocate());
      mc.reserve(slots.back(), len);
    }
    return slots;
  };
  for (auto _ : state) {
    state.PauseTiming();
    cache::ModelCache mc = bench::bench_cache(m, exact, seqs, len);
    const std::vector<int> slots = fresh(mc);
    state.ResumeTiming();
    state.SetIterationTime(prefill(m, mc, mode, slots, len));
  }
  state.SetItemsProcessed(state.iterations() * int64_t(seqs) * len);  // tokens
  backend_cuda::StepProfile prof;
  backend_cuda::set_step_profile(m, &prof);
  {
    cache::ModelCache mc = bench::bench_cache(m, exact, seqs, len);
    prefill(m, mc, mode, fresh(mc), len);
  }
  backend_cuda::set_step_profile(m, nullptr);
  bench::report_step_shares(state, prof);
}
BENCHMARK(BM_CudaHybridPrefill)
    ->ArgsProduct({{1, 8}, {2048}, {0, 1}})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace parity
