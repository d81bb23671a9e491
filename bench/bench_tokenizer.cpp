// Tokenizer encode throughput on the NeoX-style fixture tokenizer (tests/data/tokenizer_bpe/neox):
// 100 KB of prose (words cached after the first), and one word of n letters for n = 10 000 and
// 100 000, which shows how a long word scales (the heap merge: the 10x word should take about 10x,
// not 100x). bytes_per_second counts input bytes.
//
//   ./parity_bench --benchmark_filter=Tokenizer
#include <benchmark/benchmark.h>

#include <string>

#include "tokenizer/tokenizer.h"

namespace {

const parity::tokenizer::Tokenizer& neox() {
  static const auto t = parity::tokenizer::Tokenizer::from_file(std::string(PARITY_SOURCE_DIR) +
                                                                "/tests/data/tokenizer_bpe/neox/tokenizer.json");
  return *t;
}

void BM_TokenizerEncodeProse(benchmark::State& state) {
  std::string text;
  const char* words[] = {"the ", "model ", "reads ", "a ", "prompt, ", "and ", "writes ", "12345 ", "tokens.\n", "café "};
  for (std::size_t i = 0; text.size() < 100000; ++i) text += words[(i * 7) % 10];
  for (auto _ : state) benchmark::DoNotOptimize(neox().encode(text));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_TokenizerEncodeProse)->Unit(benchmark::kMillisecond);

void BM_TokenizerEncodeLongWord(benchmark::State& state) {
  std::string text;
  const std::string letters = "thequickbrownfoxjumpsoverthelazydog";
  for (int64_t i = 0; i < state.range(0); ++i) text += letters[static_cast<std::size_t>(i) % letters.size()];
  for (auto _ : state) benchmark::DoNotOptimize(neox().encode(text));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_TokenizerEncodeLongWord)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace
