// Where a batch-1 decode step of mamba2-2.7b spends its time on the GPU (issue 11: the 1.3× weight-read
// floor target), registered into parity_gpu_bench beside cuda_bench.cpp:
// - BM_CudaDecodeParts: the step from its CUDA graph with launches left out (set_decode_skip). A
//   kernel's cost on the step's critical path is the full step's time less the step without it; the
//   step with only one kind of launch (every other bit set) is what that kernel takes alone, 64 times
//   over; everything left out (127) is the embedding, the last residual add, the logits copy and the
//   host's share of forward().
// - BM_CudaMmaChain: the no-split-K floor's unit, a dependent 16-deep tensor-core step (mma_chain.h).
// - BM_CudaGemmSwapAbProbe: inside out_proj's kernel at one row, the step loop's cycles a box and how many
//   of them wait for data.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "bench_cache.h"
#include "big_model.h"
#include "kernel_timeline.h"
#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gated_a.h"
#include "kernels_cuda/gemm_swap_ab.h"
#include "kernels_cuda/mma_chain.h"
#include "kernels_cuda/ops.h"

namespace parity {
namespace {

bool gpu_here(benchmark::State& state) {
  if (cuda::device_count() > 0) return true;
  state.SkipWithError("no CUDA device: not run");
  return false;
}

// The GEMMs' early-start flags (ops.h's GemmEarly and early_start.h's; 35 the default) and which launches
// do their neighbours' work (gemmfuse, BM_CudaDecodeParts below); restore_launches() puts the defaults back.
void set_launches(unsigned gemm, int fuse) {
  cuda::set_gemm_early(gemm);
  cuda::set_conv_epilogue((fuse & 1) != 0);
  cuda::set_gated_out_proj((fuse & 2) != 0);
  cuda::set_gate_in_conv((fuse & 4) != 0);
  cuda::set_gate_in_epilogue((fuse & 8) != 0);
  cuda::set_conv_epilogue_grouped((fuse & 16) != 0);
}
void restore_launches() {
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
  cuda::set_conv_epilogue(cuda::kConvEpilogueDefault);
  cuda::set_gated_out_proj(cuda::kGatedOutProjDefault);
  cuda::set_gate_in_conv(true);
  cuda::set_gate_in_epilogue(cuda::kGateInEpilogueDefault);
  cuda::set_conv_epilogue_grouped(false);
}

// One decode step of the prepared batch at the next position.
void decode_step(model::Model& m, bench::DecodeRun& run) {
  for (auto& q : run.d.seqs) q.start = run.pos;
  m.forward(run.d, run.mc, run.mode, run.logits.get());
  ++run.pos;
}

// arg0 batch, arg1 0 plain / 1 exact, arg2 the DecodeSkip bits, arg3 the GEMMs' early-start flags (ops.h's
// GemmEarly and early_start.h's; 35 the default), arg4 launches doing their neighbours' work: bit 1 in_proj
// a decode pass's conv (conv_epilogue.h), bit 2 out_proj a one-row pass's gated norm (gated_a.h), bit 4 the
// conv the gated norm's silu(z) (ops.h's GateJob), bit 8 (with 1 and 4) in_proj's epilogue the silu(z)
// instead (ConvEpilogue::gate), bit 16 (with 1) the conv epilogue's GEMM on the grouped consumer; 4 the
// default, 0 session 11's launches. Graphs, fused and programmatic launches on.
// Wall time of Model::forward as BM_CudaModelDecode times it; step_us and us_per_layer (step / 64) as
// counters.
void BM_CudaDecodeParts(benchmark::State& state) {
  if (!gpu_here(state)) return;
  model::Model& m = bench::mamba2_2p7b();
  const int batch = static_cast<int>(state.range(0));
  const bool exact = state.range(1) != 0;
  backend_cuda::set_decode_skip(m, static_cast<unsigned>(state.range(2)));
  set_launches(static_cast<unsigned>(state.range(3)), static_cast<int>(state.range(4)));
  bench::DecodeRun run = bench::prepare_decode(m, exact, batch);
  const double step = bench::time_decode_steps(state, m, run);
  state.counters["step_us"] = step * 1e6;
  state.counters["us_per_layer"] = step * 1e6 / 64;
  backend_cuda::set_decode_skip(m, 0);
  restore_launches();
}
// Session 11's step (the conv in its own launch), plain batch 1: everything; each launch left out; each
// launch alone (every other bit: 126 = the norm alone, 125 in_proj, 123 the conv, 119 the SSM step, 111
// the gated norm, 95 out_proj, 63 the head); nothing (127). Exact batch 1: everything, without the SSM
// step, the SSM step alone.
BENCHMARK(BM_CudaDecodeParts)
    ->ArgsProduct(
        {{1}, {0}, {0, 1, 2, 4, 8, 16, 32, 64, 126, 125, 123, 119, 111, 95, 63, 127}, {cuda::kGemmEarlyDefault}, {0}})
    ->ArgsProduct({{1}, {1}, {0, 8, 119}, {cuda::kGemmEarlyDefault}, {0}})
    ->ArgNames({"batch", "exact", "skip", "gemm", "gemmfuse"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// Every launch, the early-start flags side by side (ops.h, early_start.h): 35 the default; 163 = 35 +
// park (the GEMMs' consumers sleep until the kernel before completes); 171 = 163 + the norms' release
// before their wait at every row count (in_proj scheduled while the last layer's out_proj runs, out_proj
// while the SSM step runs); 419 = 163 + the conv's and SSU's release before their wait; 427 = 171 + 419;
// 939 = 427 + the rest of each mma.sync block's weights asked of L2 before its wait. gemmfuse 0..3: the
// conv's and the gated norm's own launches, in_proj doing the conv (up to 8 rows), out_proj doing the norm
// (one row), both (at 64 rows the same launches every way).
// The gate's silu in the conv's launch (4; 0, the norm's own exps, is registered below for 1 and 64
// rows), the budget rows of the gated norm with it (111 the norm alone, 16 the step without it).
BENCHMARK(BM_CudaDecodeParts)
    ->ArgsProduct({{1, 64, 256}, {0, 1}, {0}, {35}, {4}})
    ->ArgsProduct({{1}, {0, 1}, {0}, {35}, {6}})
    ->ArgsProduct({{256}, {0, 1}, {0}, {35}, {0}})
    ->ArgsProduct({{1}, {0}, {16, 111}, {35}, {4}})
    ->ArgNames({"batch", "exact", "skip", "gemm", "gemmfuse"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// Session 34: the conv in in_proj's epilogue with the gate's silu(z) there too (13), on the grouped
// consumer (21 without the gate, 29 with it), against the default (4) and session 12's form (5: the conv in
// the epilogue, the gate's exps back in the norm).
BENCHMARK(BM_CudaDecodeParts)
    ->ArgsProduct({{1, 8}, {0, 1}, {0}, {35}, {4, 5, 13, 21, 29}})
    ->ArgNames({"batch", "exact", "skip", "gemm", "gemmfuse"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// Sessions 24 and 35: the same budget with the default launches (gemmfuse 4) at 64 and 256 sequences (where
// the tokens/s of a large batch go) and at one (today's batch-1 step, plain and exact).
BENCHMARK(BM_CudaDecodeParts)
    ->ArgsProduct({{1, 64, 256},
                   {0, 1},
                   {0, 1, 2, 4, 8, 16, 32, 64, 126, 125, 123, 119, 111, 95, 63, 127},
                   {cuda::kGemmEarlyDefault},
                   {4}})
    ->ArgNames({"batch", "exact", "skip", "gemm", "gemmfuse"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaDecodeParts)
    ->ArgsProduct({{1}, {0, 1}, {0}, {35}, {0, 1, 2, 3}})
    ->ArgsProduct({{64}, {0, 1}, {0}, {35}, {0, 3}})
    ->ArgsProduct({{1}, {0, 1}, {0}, {163, 171, 419, 427, 939}, {3, 4}})
    ->ArgsProduct({{64}, {0, 1}, {0}, {171, 427}, {3}})
    ->ArgNames({"batch", "exact", "skip", "gemm", "gemmfuse"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// Session 36: out_proj scheduled once in_proj has completed (early_start.h): 49187 = 35 + the SSM step's
// and the gated norm's release before their wait (16384 + 32768), 49315 = 49187 + park (128); with
// out_proj's wider rings (gemm_swap_ab.h: 4096 one block an SM, 8192 16-column blocks): 53283, 57379, and
// 4131 the wide ring alone; 32803 = 35 + the gated norm's early release alone (out_proj scheduled when the
// SSM step's wait returns, its state already read), 36899 with the wide ring; against 35.
BENCHMARK(BM_CudaDecodeParts)
    ->ArgsProduct({{1, 8}, {0, 1}, {0}, {35, 49187, 49315, 53283, 57379, 4131, 32803, 36899}, {4}})
    ->ArgNames({"batch", "exact", "skip", "gemm", "gemmfuse"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// Session 13: 1059 = 35 + kGemmMmaBoxByBox (gemm_swap_ab.h): session 12's box-by-box mma.sync consumer
// instead of the grouped one: everything, and out_proj / in_proj alone (skip 95 / 125; gemm:35's rows are
// registered above).
BENCHMARK(BM_CudaDecodeParts)
    ->ArgsProduct({{1}, {0, 1}, {0, 95, 125}, {1059}, {0}})
    ->ArgNames({"batch", "exact", "skip", "gemm", "gemmfuse"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The step untouched, read kernel by kernel (kernel_timeline.h): arg0 batch, arg1 0 plain / 1 exact, arg2
// and arg3 as BM_CudaDecodeParts's gemm and gemmfuse (34: the default less the weights' early request, so
// each small kernel's share is its own), arg4 BM_CudaDecodeParts's skip bits (0: untouched; 4, the conv's
// launch left out: what the SSM step costs right after in_proj, as a conv done in its launch would have
// it; the logits are then wrong). The timed loop is BM_CudaDecodeParts's (step_us);
// then kTraced more steps run with CUPTI's kernel records on (traced_step_us: first start to last end).
// Each kernel's share of the step's path, its life and its lead go to stderr and, where
// PARITY_TIMELINE_DIR names a folder, to a CSV there named after the benchmark's arguments.
void BM_CudaDecodeTimeline(benchmark::State& state) {
  if (!gpu_here(state)) return;
  constexpr int kTraced = 20;  // steps; mamba2-2.7b has 64 layers (us_per_layer above)
  model::Model& m = bench::mamba2_2p7b();
  const int batch = static_cast<int>(state.range(0));
  const bool exact = state.range(1) != 0;
  set_launches(static_cast<unsigned>(state.range(2)), static_cast<int>(state.range(3)));
  backend_cuda::set_decode_skip(m, static_cast<unsigned>(state.range(4)));
  bench::DecodeRun run = bench::prepare_decode(m, exact, batch);
  state.counters["step_us"] = bench::time_decode_steps(state, m, run) * 1e6;
  std::string why;
  if (bench::kernel_timeline_start(&why)) {
    for (int i = 0; i < kTraced; ++i) decode_step(m, run);
    const bench::KernelTimeline t = bench::kernel_timeline_finish(kTraced, 64);
    if (t.available) {
      state.counters["traced_step_us"] = t.step_us;
      state.counters["kernels"] = t.kernels_per_step;
      const std::string name = "timeline-b" + std::to_string(batch) + (exact ? "-exact" : "-plain") + "-g" +
                               std::to_string(state.range(2)) + "-f" + std::to_string(state.range(3)) +
                               (state.range(4) != 0 ? "-s" + std::to_string(state.range(4)) : "");
      const std::string csv = bench::kernel_timeline_csv(t);
      std::fprintf(stderr, "%s (%d steps, %d kernels a step, %.1f us a step)\n%s", name.c_str(), t.steps,
                   t.kernels_per_step, t.step_us, csv.c_str());
      if (const char* dir = std::getenv("PARITY_TIMELINE_DIR")) {
        if (std::FILE* f = std::fopen((std::string(dir) + "/" + name + ".csv").c_str(), "w")) {
          std::fputs(csv.c_str(), f);
          std::fclose(f);
        }
      }
    } else {
      state.SetLabel("no timeline: " + t.why);
    }
  } else {
    state.SetLabel("no timeline: " + why);
  }
  backend_cuda::set_decode_skip(m, 0);
  restore_launches();
}
BENCHMARK(BM_CudaDecodeTimeline)
    ->ArgsProduct({{1}, {0, 1}, {cuda::kGemmEarlyDefault, 34, 427, 49187, 53283, 32803, 36899}, {4}, {0}})
    ->ArgsProduct({{1}, {0, 1}, {cuda::kGemmEarlyDefault, 34}, {4}, {4}})
    ->ArgsProduct({{64}, {0, 1}, {cuda::kGemmEarlyDefault}, {4}, {0}})
    // Session 38: the decode GEMMs' rows split into row tiles (gemm_swap_ab.h's kGemmRowTileSplit).
    ->ArgsProduct({{64, 256}, {0, 1}, {cuda::kGemmEarlyDefault | cuda::kGemmRowTileSplit}, {4}, {0}})
    ->ArgsProduct({{256}, {0, 1}, {cuda::kGemmEarlyDefault}, {4}, {0}})
    // out_proj from 17 to 32 rows on the mma.sync kernel's 32-column blocks (the default) or on c64-2blk.
    ->ArgsProduct(
        {{32}, {0, 1}, {cuda::kGemmEarlyDefault, cuda::kGemmEarlyDefault | cuda::kGemmWgmmaFrom17Rows}, {4}, {0}})
    // and from 33 to 64 rows, two row tiles of 32 (kGemmMmaTo64Rows), against the default's 64-row rows above.
    ->ArgsProduct({{64}, {0, 1}, {cuda::kGemmEarlyDefault | cuda::kGemmMmaTo64Rows}, {4}, {0}})
    // or row tiles of 16 (session 39, kGemmMmaTo64RowsIn16).
    ->ArgsProduct({{64}, {0, 1}, {cuda::kGemmEarlyDefault | cuda::kGemmMmaTo64RowsIn16}, {4}, {0}})
    // or c64-2blk (kGemmWgmmaFrom33Rows: before session 39; the default since, row tiles of 32 as two row warps).
    ->ArgsProduct({{64}, {0, 1}, {cuda::kGemmEarlyDefault | cuda::kGemmWgmmaFrom33Rows}, {4}, {0}})
    ->ArgNames({"batch", "exact", "gemm", "gemmfuse", "skip"})
    ->UseManualTime()
    ->Iterations(50)
    ->Unit(benchmark::kMicrosecond);

// arg0 the way (mma_chain.h's MmaChainWay), arg1 chains a block (warps for mma.sync, warpgroups for
// wgmma), arg2 blocks (0: one per SM). 320 steps: out_proj's K = 5120. cycles_per_step: the chains'
// mean; chain_us: 320 such steps at the device's top clock, the least out_proj at one row can take
// after its input lands (no split-K).
void BM_CudaMmaChain(benchmark::State& state) {
  if (!gpu_here(state)) return;
  const int way = static_cast<int>(state.range(0)), chains = static_cast<int>(state.range(1));
  int blocks = static_cast<int>(state.range(2));
  int sms = 0, khz = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  if (blocks == 0) blocks = sms;
  state.SetLabel(cuda::mma_chain_way_name(way));
  constexpr int kSteps = cuda::kMmaChainSteps;
  cuda::MmaChainResult r;
  double cycles = 0;
  for (auto _ : state) {
    r = cuda::mma_chain(way, chains, blocks);
    state.SetIterationTime(r.ms / 1000.0);
    cycles += r.cycles_per_step;
  }
  const double per_step = cycles / static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["cycles_per_step"] = per_step;
  state.counters["chain_us"] = per_step * kSteps / (khz * 1e-3);
  state.counters["clock_mhz"] = khz * 1e-3;
}
BENCHMARK(BM_CudaMmaChain)
    ->ArgsProduct({{0, 1}, {1, 2, 4}, {1, 0}})
    ->ArgsProduct({{2, 3}, {1, 2}, {1, 0}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Where out_proj's (arg0 0: in_proj's) time goes at one row on the mma.sync swap-AB kernel (arg1: the
// consumer schedule and blocks an SM, gemm_bf16_swap_ab_probe's schedule: 0 session 12's box by box, 1 its
// -lag schedule, 2..4 and 6 the grouped consumer, 5 box by box with a 40-stage ring, 7..9 grouped with one
// barrier pair a group), L2 flushed before each pass as in a decode step (arg2 0: warm): each consumer warp's
// clock (gemm_bf16_swap_ab_probe), means over the warps. first_cycles: start to the first box's
// fragments (the pre-pass, the first boxes' DRAM latency); per_box: the step loop's cycles a 64-deep box
// (4 dependent steps); wait_per_box: of those, waiting on a stage's barrier (the data); chain_per_box:
// the rest; loop_us_max: the slowest warp's loop.
void BM_CudaGemmSwapAbProbe(benchmark::State& state) {
  if (!gpu_here(state)) return;
  const bool out_proj = state.range(0) == 0, cold = state.range(2) != 0;
  const int schedule = static_cast<int>(state.range(1));
  state.SetLabel(cuda::gemm_bf16_swap_ab_probe_name(schedule));
  const int N = out_proj ? 2560 : 10576, K = out_proj ? 5120 : 2560, M = 1;
  cuda::DeviceBuffer<uint16_t> w(std::size_t(cuda::padded_rows(N)) * K);
  cudaMemset(w.data(), 0x3A, w.size() * 2);  // bf16 0x3A3A: small, finite
  cuda::DeviceBuffer<float> a(std::size_t(M) * K), c(std::size_t(M) * N);
  cudaMemset(a.data(), 0x3F, a.size() * 4);
  const int warps = cuda::gemm_bf16_swap_ab_probe_warps(N);
  cuda::DeviceBuffer<long long> probe(std::size_t(warps) * 4);
  cuda::DeviceBuffer<uint8_t> junk(std::size_t(256) << 20);
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double first = 0, per_box = 0, wait = 0, loop_max = 0;
  int runs = 0;
  for (auto _ : state) {
    if (cold) cudaMemsetAsync(junk.data(), runs & 0xff, junk.size());
    cudaEventRecord(e0);
    cuda::gemm_bf16_swap_ab_probe(a.data(), M, K, K, w.data(), N, c.data(), N, nullptr, schedule, probe.data());
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(ms / 1000.0);
    const std::vector<long long> p = probe.download(probe.size());
    double f = 0, b = 0, wt = 0, lm = 0;
    for (int i = 0; i < warps; ++i) {
      const double boxes = static_cast<double>(p[4 * i + 3]), loop = static_cast<double>(p[4 * i + 1] - p[4 * i]);
      f += static_cast<double>(p[4 * i]);
      b += loop / boxes;
      wt += static_cast<double>(p[4 * i + 2]) / boxes;
      lm = std::max(lm, loop);
    }
    first += f / warps;
    per_box += b / warps;
    wait += wt / warps;
    loop_max = std::max(loop_max, lm);
    ++runs;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const double n = std::max(1, runs);
  state.counters["first_cycles"] = first / n;
  state.counters["per_box"] = per_box / n;
  state.counters["wait_per_box"] = wait / n;
  state.counters["chain_per_box"] = (per_box - wait) / n;
  state.counters["loop_us_max"] = loop_max / (khz * 1e-3);
}
BENCHMARK(BM_CudaGemmSwapAbProbe)->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 0}})->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace parity
