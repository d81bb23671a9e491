#pragma once
// One fuzz target = one entry function over raw bytes, declared with PARITY_FUZZ_TARGET(name, fn).
// Built with -DPARITY_LIBFUZZER (scripts/fuzz.sh, clang) the macro emits libFuzzer's
// LLVMFuzzerTestOneInput; built without it (the normal and sanitizer builds) it registers the
// function so that parity_fuzz_replay feeds it every file in fuzz/corpus/<name>/ and
// fuzz/regressions/<name>/. The same code runs in both, so a crash libFuzzer found stays fixed.
//
// Contract of an entry: bad input may throw parity::Error (the engine's "clear error" path) and
// nothing else; the entry catches parity::Error itself. Any other exception, a crash, or a
// sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace parity::fuzz {

using Entry = void (*)(const uint8_t* data, std::size_t size);

struct Target {
  std::string name;
  Entry entry;
};

inline std::vector<Target>& registered_targets() {
  static std::vector<Target> targets;
  return targets;
}

struct Registration {
  Registration(const char* name, Entry entry) { registered_targets().push_back({name, entry}); }
};

}  // namespace parity::fuzz

#ifdef PARITY_LIBFUZZER
#define PARITY_FUZZ_TARGET(name, fn)                                          \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) { \
    fn(data, size);                                                           \
    return 0;                                                                 \
  }
#else
#define PARITY_FUZZ_TARGET(name, fn) \
  static const ::parity::fuzz::Registration parity_fuzz_registration_##name(#name, fn);
#endif
