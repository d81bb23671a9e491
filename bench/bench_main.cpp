// The one BENCHMARK_MAIN of parity_bench (the target links benchmark::benchmark, not
// benchmark_main, so that exactly one file provides main).
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
