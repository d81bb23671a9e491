#pragma once
// Where a CUDA model's logits land on the host (model::Model::host_floats): page-locked memory, so that
// the copy after a pass (decode_graphs.h's copy_logit_rows) is one DMA at the host link's rate. From
// pageable memory the runtime stages the copy through its own pinned buffer: a 256-sequence decode
// step of mamba2-2.7b (51 MB of logits) spent ~6 ms of its 25 in that copy (docs/performance.md,
// session 24).
#include <cstddef>

#include "model/model.h"

namespace parity::backend_cuda {

// n floats of page-locked host memory (usable by every device's copies), uninitialised; ordinary
// memory when the runtime cannot lock that much (the copy is then the staged one, still correct).
model::HostFloats pinned_host_floats(std::size_t n);

}  // namespace parity::backend_cuda
