// Fuzz target: the safetensors reader (8-byte header length, JSON header, dtypes, shapes, byte
// ranges). Beyond "no crash", it checks what the reader promises its callers: every tensor's bytes
// lie inside the file and match shape × dtype, and the tensors tile the data buffer exactly.
#include <cstdlib>

#include "common/error.h"
#include "fuzz_target.h"
#include "input_file.h"
#include "io/safetensors.h"

namespace {

void fuzz_safetensors(const uint8_t* data, std::size_t size) {
  std::shared_ptr<parity::io::SafetensorsFile> f;
  try {
    f = parity::io::SafetensorsFile::open(parity::fuzz::input_file(data, size));
  } catch (const parity::Error&) {
    return;
  }
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | data[i];
  std::size_t covered = 0;
  for (const parity::io::TensorView& t : f->tensors()) {
    if (t.nbytes != static_cast<std::size_t>(t.numel()) * parity::dtype_size(t.dtype)) std::abort();
    if (f->find(t.name) == nullptr) std::abort();
    // Read the first and last byte: outside the mapping this faults.
    if (t.nbytes > 0) {
      const auto* p = static_cast<const volatile unsigned char*>(t.data);
      (void)p[0];
      (void)p[t.nbytes - 1];
    }
    covered += t.nbytes;
  }
  if (covered != size - 8 - header) std::abort();
}

}  // namespace

PARITY_FUZZ_TARGET(safetensors, fuzz_safetensors)
