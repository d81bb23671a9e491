#pragma once
// Asking for a row before the loop reaches it. The prefill passes over activations (the conv over
// in_proj's output, the gated norm over y and z) stream rows of several KiB laid out with a
// stride; the hardware prefetchers restart at every 4 KiB page and lose the stream between rows,
// so each row's loads waited on memory (perf: ~40 % of the conv's samples on the FMA behind a
// window load). A hint only: no value depends on it.
#include <cstddef>

namespace parity::kernels {

inline void prefetch_row(const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (std::size_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 3);
}

}  // namespace parity::kernels
