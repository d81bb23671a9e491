#pragma once
// Seed 000's hand-off between the runner and model code: the runner sets a context before a
// pass and clears it after; model code asks for a tensor by module name and gets nothing when
// replacement is not configured. Thread-local, so two engines on two threads (tests, a server
// with one engine per thread) cannot see each other's context.
#include <memory>
#include <string>

#include "accuracy/tensor_replacer.h"

namespace parity::accuracy {

void set_active_context(std::shared_ptr<const ReplacementContext> ctx);  // nullptr clears
// nullptr when no context is active or the context holds no such module.
const Matrix* get_replacement_tensor(const std::string& name);

// Sets a context for one scope and clears it on the way out, exceptions included.
class ActiveContextScope {
 public:
  explicit ActiveContextScope(std::shared_ptr<const ReplacementContext> ctx) { set_active_context(std::move(ctx)); }
  ~ActiveContextScope() { set_active_context(nullptr); }
  ActiveContextScope(const ActiveContextScope&) = delete;
  ActiveContextScope& operator=(const ActiveContextScope&) = delete;
};

}  // namespace parity::accuracy
