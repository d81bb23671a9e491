#pragma once
// Identities of probe-hook objects for prefix caching (model::ProbeHooks::prefix_identity): each
// object gets a number no other object of this process gets, so cached states made under one set
// of hooks are never reused under another.
#include <atomic>
#include <cstdint>

#include <xxhash.h>

namespace parity::accuracy {

inline uint64_t new_hooks_identity() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1) * 0x9e3779b97f4a7c15ull;
}

inline uint64_t combine_identities(uint64_t a, uint64_t b) {
  const uint64_t parts[2] = {a, b};
  return XXH3_64bits(parts, sizeof parts);
}

}  // namespace parity::accuracy
