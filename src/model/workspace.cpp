#include "model/workspace.h"

#include <array>

#include "common/aligned.h"

namespace parity::model {

float* scratch(Scratch role, std::size_t n) {
  thread_local std::array<AlignedBuffer<float>, static_cast<std::size_t>(Scratch::Count)> buffers;
  AlignedBuffer<float>& b = buffers[static_cast<std::size_t>(role)];
  if (b.size() < n) b.resize(n);  // grows only: a smaller pass keeps the pages it already touched
  return b.data();
}

}  // namespace parity::model
