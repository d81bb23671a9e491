#include "frontends/cli/engine_flags.h"

#include "frontends/cli/device_flags.h"
#include "frontends/cli/moe_routing_flag.h"
#include "frontends/cli/numerics_flags.h"
#include "frontends/cli/serving_flags.h"

namespace parity::cli {

void add_engine_flags(CLI::App* sub, EngineFlags& f, const EngineFlagSet& which) {
  add_device_flags(sub, f.device);
  if (which.numerics) add_numerics_flags(sub, f.numerics);
  if (which.serving) add_serving_flags(sub, f.serving);
  if (which.max_num_batched_tokens)
    sub->add_option("--max-num-batched-tokens", f.max_num_batched_tokens, "token budget per pass")
        ->check(CLI::Range(1, 1 << 24));
  if (which.max_num_seqs)
    sub->add_option("--max-num-seqs", f.max_num_seqs, "sequences per pass")->check(CLI::Range(1, 4096));
  if (which.max_model_len)
    sub->add_option("--max-model-len", f.max_model_len, "longest request (prompt + continuation)")
        ->check(CLI::PositiveNumber);
  if (which.state_memory)
    sub->add_option("--state-memory-mb", f.state_memory_mb,
                    "state + KV cache budget in MiB (default: one slot per sequence, KV for 4096 tokens each)")
        ->check(CLI::NonNegativeNumber);
  if (which.state_memory)
    sub->add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                    "with --device cuda: give the state + KV caches this share (0..1] of the GPU's memory, as vLLM "
                    "(what is free after the weights minus the rest of the total); instead of --state-memory-mb");
  if (which.preempt)
    sub->add_option("--preempt-at-step", f.preempt_at_step,
                    "preempt every running request at this step (then recompute)")
        ->check(CLI::PositiveNumber);
  if (which.threads)
    sub->add_option("--threads", f.threads, "worker threads (default: all cores)")->check(CLI::Range(1, 1024));
  if (which.additional_config)
    sub->add_option("--additional-config", f.additional_config,
                    "JSON, e.g. {\"tensor_replacement\": {\"tensors_path\": …}}");
  add_moe_routing_flag(sub, f.moe_routing);
}

}  // namespace parity::cli
