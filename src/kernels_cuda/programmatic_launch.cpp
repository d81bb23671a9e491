// The switch behind programmatic_launch.cuh's launches (ops.h).
#include <atomic>

#include "kernels_cuda/ops.h"

namespace parity::cuda {
namespace {
std::atomic<bool> programmatic{true};
}  // namespace

bool programmatic_launch() { return programmatic.load(); }
void set_programmatic_launch(bool on) { programmatic.store(on); }

}  // namespace parity::cuda
