#pragma once
// A StepProfile's totals (backend_cuda/step_profile.h) as benchmark counters: each kind of work's
// share of the profiled passes' time in percent, and the profiled time per pass. attn_pct is the
// projections plus RoPE / KV write / attention; mamba_pct the whole mixer, split further into
// mamba_gemm_pct (in/out_proj), mamba_conv_pct, mamba_ssd_pct (dt + scan) and mamba_norm_pct; moe_pct
// the router and the routed experts; mlp_pct the shared MLP; other_pct embedding, norms, residual
// adds and lm_head. Counters of parts a model lacks are left out.
#include <benchmark/benchmark.h>

#include "backend_cuda/step_profile.h"

namespace parity::bench {

inline void report_step_shares(benchmark::State& state, const backend_cuda::StepProfile& p) {
  using backend_cuda::StepPart;
  const double total = p.total_seconds();
  if (total <= 0 || p.passes() == 0) return;
  auto pct = [&](std::initializer_list<StepPart> parts) {
    double s = 0;
    for (StepPart q : parts) s += p.seconds(q);
    return 100.0 * s / total;
  };
  const double attn = pct({StepPart::AttnProj, StepPart::AttnCore}), moe = pct({StepPart::Moe}),
               mlp = pct({StepPart::SharedMlp});
  if (attn > 0) {
    state.counters["attn_pct"] = attn;
    state.counters["attn_core_pct"] = pct({StepPart::AttnCore});
  }
  if (moe > 0) state.counters["moe_pct"] = moe;
  if (mlp > 0) state.counters["mlp_pct"] = mlp;
  state.counters["mamba_pct"] =
      pct({StepPart::MambaGemm, StepPart::MambaConv, StepPart::MambaSsd, StepPart::MambaNorm});
  state.counters["mamba_gemm_pct"] = pct({StepPart::MambaGemm});
  state.counters["mamba_conv_pct"] = pct({StepPart::MambaConv});
  state.counters["mamba_ssd_pct"] = pct({StepPart::MambaSsd});
  state.counters["mamba_norm_pct"] = pct({StepPart::MambaNorm});
  state.counters["other_pct"] = pct({StepPart::Other});
  state.counters["profiled_ms"] = 1000.0 * total / p.passes();
}

}  // namespace parity::bench
