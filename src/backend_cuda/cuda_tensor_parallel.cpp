#include "backend_cuda/cuda_tensor_parallel.h"

#include <cstdlib>

#include "backend_cuda/cuda_hybrid_model.h"
#include "backend_cuda/cuda_mamba2_model.h"
#include "backend_cuda/host_staged_collective.h"
#include "backend_cuda/nccl_collective.h"
#include "cache/rank_shape.h"
#include "common/error.h"
#include "io/granite_config.h"
#include "io/hf_config.h"
#include "kernels_cuda/ops.h"
#include "model/tensor_parallel_model.h"

namespace parity::backend_cuda {
namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string device_list(const std::vector<int>& devices) {
  std::string s;
  for (int d : devices) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

}  // namespace

CollectiveChoice collective_choice_from_env() {
  const char* v = std::getenv("PARITY_TP_COLLECTIVE");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return CollectiveChoice::Auto;
  if (s == "nccl") return CollectiveChoice::Nccl;
  if (s == "host-staged") return CollectiveChoice::HostStaged;
  throw Error("PARITY_TP_COLLECTIVE must be auto, nccl or host-staged, not '" + s + "'");
}

std::vector<int> rank_devices(int tp, int device_count) {
  std::vector<int> d;
  for (int r = 0; r < tp; ++r) d.push_back(r % device_count);
  return d;
}

std::unique_ptr<model::Model> load_tensor_parallel(const model::Checkpoint& ck, int tp, const CudaModelOptions& opt) {
  const std::string arch = io::architecture_of(ck.config);
  const bool granite = arch == "GraniteMoeHybridForCausalLM";
  if (arch != "Mamba2ForCausalLM" && !granite)
    throw Error(ck.origin + ": the CUDA backend runs Mamba2ForCausalLM and GraniteMoeHybridForCausalLM; '" + arch +
                "' runs with --device cpu");
  model::check_tensor_parallel_split(ck, tp);  // the CPU's refusals, before any device is touched
  const int count = cuda::device_count();
  if (count == 0) throw Error("--device cuda: " + describe_device());
  const std::vector<int> devices = rank_devices(tp, count);
  const CollectiveChoice choice = collective_choice_from_env();

  // NCCL when it can run, else the host-staged sums (made with rank 0: it needs the host collective).
  std::shared_ptr<DeviceCollective> collective;
  std::string how;
  if (choice == CollectiveChoice::HostStaged) {
    how = "host-staged collective (PARITY_TP_COLLECTIVE=host-staged)";
  } else if (tp > count) {
    const std::string why = std::to_string(count) + " GPU" + (count == 1 ? "" : "s") + " for " + std::to_string(tp) +
                            " ranks: NCCL needs a GPU per rank";
    if (choice == CollectiveChoice::Nccl) throw Error("PARITY_TP_COLLECTIVE=nccl: " + why);
    how = "host-staged collective (" + why + ")";
  } else {
    try {
      auto nccl = std::make_shared<NcclCollective>(nccl::library(), devices);
      how = "NCCL collective (" + nccl->library_path() + ")";
      collective = std::move(nccl);
    } catch (const Error& e) {
      if (choice == CollectiveChoice::Nccl) throw;
      how = "host-staged collective (" + first_line(e.what()) + ")";
    }
  }

  CudaModelOptions rank_opt = opt;
  rank_opt.enforce_eager = true;
  model::RankBackend be;
  be.state_on_device = true;
  be.placement = "tensor parallel " + std::to_string(tp) + ": ranks on GPU " + device_list(devices) + "; " + how +
                 "; eager (no CUDA graphs)";
  if (collective) be.abort = [c = collective] { c->abort(); };
  be.make_rank = [&](const model::RankSource& src) -> std::unique_ptr<model::Model> {
    if (!collective) collective = std::make_shared<HostStagedCollective>(src.tp.collective);
    const DeviceRank rank{src.tp.rank, src.tp.size, devices[static_cast<std::size_t>(src.tp.rank)], collective.get()};
    if (!granite)
      return CudaMamba2Model::load_rank(src.ck, cache::rank_mamba_config(io::parse_mamba2_config(ck.config), tp),
                                        src.cache, rank, collective, rank_opt);
    const io::GraniteHybridConfig whole = io::parse_granite_hybrid_config(ck.config);
    const io::Mamba2Config mamba = whole.num_layers_of(io::GraniteLayerType::Mamba) > 0
                                       ? cache::rank_mamba_config(io::to_mamba2_config(whole), tp)
                                       : io::Mamba2Config{};
    return CudaHybridModel::load_rank(src.ck, rank_granite_config(whole, tp), mamba, src.cache, rank, collective,
                                      rank_opt);
  };
  return model::TensorParallelModel::load(ck, tp, be);
}

}  // namespace parity::backend_cuda
