#pragma once
// Fetching a named tensor from a checkpoint with the checks every model loader makes: present,
// the shape the config implies, a float dtype. Errors name the tensor and both shapes.
#include <string>
#include <vector>

#include "kernels/gemm.h"
#include "model/checkpoint.h"

namespace parity::model {

const io::TensorView& need_tensor(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape);

// A [out, in] weight packed for kernels::gemm.
kernels::PackedWeight pack_tensor(const io::TensorView& t);

// Any float tensor (F32/F16/BF16) widened exactly to fp32.
std::vector<float> widen(const io::TensorView& t);
// need_tensor, widened.
std::vector<float> need_floats(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape);

}  // namespace parity::model
