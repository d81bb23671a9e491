#pragma once
// NCCL, opened at run time with dlopen (docs/tensor-parallel.md, "GPU ranks"). parity does not link
// it: it is not installed where parity builds, and on a GPU machine it usually comes with PyTorch
// (pip's nvidia-nccl-cu12 wheel, site-packages/nvidia/nccl/lib/libnccl.so.2). The few entry points
// parity calls are declared here from NCCL's public C API (nccl.h); their ABI is stable across 2.x.
// Nothing here needs the CUDA headers (a stream is passed as the pointer it is), so this file is
// built, and its refusals tested, without a GPU or a CUDA build.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace parity::backend_cuda::nccl {

using Result = int;                 // ncclResult_t; 0 is ncclSuccess
using Comm = struct ncclComm*;      // ncclComm_t
struct UniqueId {                   // ncclUniqueId
  char internal[128];
};
inline constexpr int kFloat32 = 7;  // ncclFloat32 in ncclDataType_t

struct Library {
  std::string path;  // what was opened
  Result (*get_unique_id)(UniqueId*) = nullptr;
  Result (*comm_init_rank)(Comm*, int nranks, UniqueId id, int rank) = nullptr;
  Result (*all_gather)(const void* send, void* recv, std::size_t count, int dtype, Comm, void* stream) = nullptr;
  Result (*group_start)() = nullptr;
  Result (*group_end)() = nullptr;
  Result (*comm_destroy)(Comm) = nullptr;
  Result (*comm_abort)(Comm) = nullptr;
  const char* (*get_error_string)(Result) = nullptr;

  // parity::Error "NCCL: <what>: <NCCL's message>" unless r is ncclSuccess.
  void check(Result r, const char* what) const;
};

// Where parity looks, in order: PARITY_NCCL_LIBRARY when it is set (then only there); else
// libnccl.so.2 on the dynamic loader's path (LD_LIBRARY_PATH, ldconfig), then the nvidia-nccl wheel's
// lib folder under the usual Python prefixes (a virtualenv or conda environment, ~/.local,
// /usr/local/lib, /usr/lib, /opt/conda) and PYTHONPATH.
std::vector<std::string> candidates();

// The first candidate that opens and has every entry point above. parity::Error otherwise, naming
// libnccl.so.2, each candidate with why it failed (dlerror, or the missing entry point), and how to
// point parity at the library (PARITY_NCCL_LIBRARY).
std::shared_ptr<const Library> load(const std::vector<std::string>& candidates);

// load(candidates()), once per process (a failure is retried on the next call).
std::shared_ptr<const Library> library();

}  // namespace parity::backend_cuda::nccl
