// Fuzz target: captures files (safetensors with p{i}/{module}[/step{k}] names and layout metadata),
// read, listed and flattened as `compare` and `validate` do.
#include "accuracy/captures_file.h"
#include "common/error.h"
#include "fuzz_target.h"
#include "input_file.h"

namespace {

void fuzz_captures(const uint8_t* data, std::size_t size) {
  using namespace parity::accuracy;
  try {
    const Captures c = read_captures(parity::fuzz::input_file(data, size));
    (void)captured_modules(c);
    for (const PromptCapture& p : c.prompts) (void)flatten(p);
  } catch (const parity::Error&) {
  }
}

}  // namespace

PARITY_FUZZ_TARGET(captures, fuzz_captures)
