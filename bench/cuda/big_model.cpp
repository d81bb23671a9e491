#include "big_model.h"

#include <memory>

#include "backend_cuda/backend.h"
#include "model/checkpoint.h"

namespace parity::bench {

model::Model& mamba2_2p7b() {
  static std::unique_ptr<model::Model> m = backend_cuda::load_model(model::open_checkpoint("builtin:mamba2-2.7b"));
  return *m;
}

}  // namespace parity::bench
