#pragma once
// Tensor parallelism on GPUs (docs/tensor-parallel.md, "GPU ranks"). One process drives every rank:
// model::TensorParallelModel splits the checkpoint as on the CPU (model/tp_plan.h, the same refusals)
// and runs the ranks' forwards side by side, rank 0 on the caller's thread; the ranks here are
// CudaMamba2Model / CudaHybridModel loaded from their slices, rank r on GPU r % device_count() (so on
// one GPU every rank shares GPU 0), each with its own stream, weights and device state. Their
// row-split projections' partial sums go through a DeviceCollective:
//  - NCCL (nccl_collective.h) when every rank has a GPU of its own and libnccl.so.2 loads;
//  - host-staged (host_staged_collective.h) otherwise: ranks sharing a GPU (NCCL refuses two ranks on
//    one device) or no NCCL.
// Both give the CPU rule's bits: the all-gathered partials added in rank order. PARITY_TP_COLLECTIVE
// (auto | nccl | host-staged) overrides the choice; nccl then fails rather than fall back. The ranks
// run eagerly (no CUDA graphs): the host-staged sum synchronises with the host, and NCCL capture is
// left for later. Model::placement() says where the ranks are and which collective runs.
#include <memory>
#include <string>
#include <vector>

#include "backend_cuda/backend.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace parity::backend_cuda {

enum class CollectiveChoice { Auto, Nccl, HostStaged };

// PARITY_TP_COLLECTIVE's value (unset: Auto); parity::Error for anything else.
CollectiveChoice collective_choice_from_env();

// Rank r's GPU: r % device_count.
std::vector<int> rank_devices(int tp, int device_count);

// tp > 1 GPU ranks of MODEL (Mamba2ForCausalLM or GraniteMoeHybridForCausalLM); parity::Error for a
// split that does not fit (as on the CPU), another architecture, no device, or a forced collective
// that cannot run.
std::unique_ptr<model::Model> load_tensor_parallel(const model::Checkpoint& ck, int tp, const CudaModelOptions& opt);

}  // namespace parity::backend_cuda
