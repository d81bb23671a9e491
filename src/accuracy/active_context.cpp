#include "accuracy/active_context.h"

namespace parity::accuracy {

namespace {
thread_local std::shared_ptr<const ReplacementContext> active;
}

void set_active_context(std::shared_ptr<const ReplacementContext> ctx) { active = std::move(ctx); }

const Matrix* get_replacement_tensor(const std::string& name) {
  if (!active) return nullptr;
  auto it = active->find(name);
  return it == active->end() ? nullptr : &it->second;
}

}  // namespace parity::accuracy
