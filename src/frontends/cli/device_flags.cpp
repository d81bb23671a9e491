#include "frontends/cli/device_flags.h"

namespace parity::cli {

void add_device_flags(CLI::App* sub, DeviceFlags& f) {
  sub->add_option("--device", f.device, "cpu (default) or cuda (GPU 0; tensor-parallel rank r on GPU r % GPU count)")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--dtype", f.dtype,
                  "with --device cuda: bfloat16 GEMM inputs on tensor cores (default) or float32 (accuracy work)")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
  sub->add_option("--tensor-parallel-size", f.tensor_parallel_size,
                  "split the model over N ranks (CPU: worker threads; cuda: rank r on GPU r % GPU count, NCCL when each "
                  "rank has its own GPU, else host-staged sums; Mamba heads and groups, attention KV heads, MLP and "
                  "expert widths must divide by N; docs/tensor-parallel.md)")
      ->check(CLI::Range(1, 64));
  sub->add_flag("--enforce-eager,--no-cuda-graphs", f.enforce_eager,
                "with --device cuda: launch every pass kernel by kernel instead of replaying decode steps as CUDA "
                "graphs (same bits; as vLLM's --enforce-eager)");
}

}  // namespace parity::cli
