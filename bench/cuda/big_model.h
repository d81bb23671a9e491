#pragma once
// builtin:mamba2-2.7b on the GPU, loaded once per process and shared by every benchmark that runs it
// (the end-to-end decode and prefill in cuda_bench.cpp, the decode step's parts in
// cuda_decode_budget_bench.cpp): one copy of its 5.4 GB of weights.
#include "model/model.h"

namespace parity::bench {

model::Model& mamba2_2p7b();

}  // namespace parity::bench
