// Exact vs plain decode step on builtin:mamba2-130m, measured INTERLEAVED: every iteration times
// one plain step and one exact step over the same batch (taking turns at going first), and the
// reported ratio is the median of the per-iteration ratios. On a shared machine, load from other
// processes then hits both modes alike, which separate benchmark runs minutes apart do not
// guarantee.
//
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=ExactOverhead
//
// BM_ExactOverheadChunkMean: the step's position cycles through every row of the chunk (0..255)
// once, and the ratio is that of the mean step times: the average cost over a whole chunk, fold
// steps included.
#include <benchmark/benchmark.h>

#include <memory>

#include "bench_support.h"
#include "decode_timing.h"
#include "model/checkpoint.h"
#include "model/model.h"

using namespace parity;

namespace {

void BM_ExactOverhead(benchmark::State& st) { bench::interleaved_decode(st, bench::m130()); }
BENCHMARK(BM_ExactOverhead)
    ->ArgNames({"batch", "chunkpos", "bf16"})
    ->ArgsProduct({{1, 8, 32}, {0, 1, 7, 15, 64, 127, 128, 255}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// The average over a chunk: every row of it once (decode_timing.h).
BENCHMARK(BM_ExactOverhead)
    ->Name("BM_ExactOverheadChunkMean")
    ->ArgNames({"batch", "chunkpos", "bf16"})
    ->ArgsProduct({{1, 8, 32}, {-1}, {0, 1}})
    ->Iterations(256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Decode throughput at the batch sizes of the ggml side-by-side (docs/performance.md): batch 1 and
// 16, bf16 state (plain mode's default), 64 steps spread over the chunk; plain_tok_s is the figure
// compared with ggml, exact/plain the same as above.
BENCHMARK(BM_ExactOverhead)
    ->Name("BM_DecodePeer")
    ->ArgNames({"batch", "chunkpos", "bf16"})
    ->ArgsProduct({{1, 16}, {-1}, {1}})
    ->Iterations(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Choosing exact mode's default cell: the average over a chunk for each candidate grid (the stagger
// on), both state dtypes. Arguments: batch, -1 (chunk mean), bf16, cell.
void BM_ExactGridChoice(benchmark::State& st) {
  bench::interleaved_decode(st, bench::m130(), static_cast<int>(st.range(3)));
}
BENCHMARK(BM_ExactGridChoice)
    ->ArgNames({"batch", "chunkpos", "bf16", "cell"})
    ->ArgsProduct({{8, 32}, {-1}, {0, 1}, {4, 8, 16, 32}})
    ->Iterations(256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
