// The switches behind programmatic_launch.cuh's launches and the decode GEMMs' early start (ops.h).
#include <atomic>

#include "kernels_cuda/ops.h"

namespace parity::cuda {
namespace {
std::atomic<bool> programmatic{true};
std::atomic<unsigned> early{kGemmEarlyDefault};
}  // namespace

bool programmatic_launch() { return programmatic.load(); }
void set_programmatic_launch(bool on) { programmatic.store(on); }
unsigned gemm_early() { return early.load(); }
void set_gemm_early(unsigned flags) { early.store(flags); }

}  // namespace parity::cuda
