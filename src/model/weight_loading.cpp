#include "model/weight_loading.h"

#include <cstring>
#include <sstream>

#include "common/error.h"

namespace parity::model {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

}  // namespace

const io::TensorView& need_tensor(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  const io::TensorView* t = ck.find(name);
  if (!t) throw Error(ck.origin + ": missing tensor '" + name + "'");
  if (t->shape != shape)
    throw Error(ck.origin + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", the config needs " +
                shape_str(shape));
  if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
    throw Error(ck.origin + ": tensor '" + name + "' has dtype " + dtype_name(t->dtype) +
                "; weights must be F32, F16 or BF16");
  return *t;
}

kernels::PackedWeight pack_tensor(const io::TensorView& t) {
  return kernels::pack_weight(t.data, t.dtype, static_cast<int>(t.shape[0]), static_cast<int>(t.shape[1]));
}

std::vector<float> need_floats(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  return widen(need_tensor(ck, name, shape));
}

std::vector<float> widen(const io::TensorView& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  if (t.dtype == DType::F32) {
    std::memcpy(v.data(), t.data, v.size() * 4);
  } else {
    const auto* p = static_cast<const uint16_t*>(t.data);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.dtype == DType::BF16 ? bf16_to_f32(p[i]) : f16_to_f32(p[i]);
  }
  return v;
}

}  // namespace parity::model
