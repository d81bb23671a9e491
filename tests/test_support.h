#pragma once
// Shared test helpers: scratch folders (and a fixture that has one), running the `parity` binary and
// writing its token lists, random token streams, reading files (logits among them), comparing logit rows,
// models loaded once per test process. One helper per job: a unity build compiles the test files together.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/model_options.h"
#include "model/tensor_parallel_model.h"
#include "float_compare.h"  // same_bits

namespace parity::test {

// The sanitizer build (CI's second pass: AddressSanitizer + UndefinedBehaviorSanitizer, several times
// slower). Its longest sweeps run fewer seeds or sample their rows: the same code paths and assertions,
// where a memory or UB error would show on any case; the normal build runs every case. Each use says
// what it samples (docs/performance.md, "CI time").
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

inline std::filesystem::path scratch_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("parity_test_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(p);
  return p;
}

// The model of `spec` ("builtin:NAME", an absolute folder path, or a fixture folder under tests/data
// by name), loaded once per process and options: loading a model costs more than most tests. A
// model is const, so tests sharing one cannot disturb each other.
// tensor_parallel_size > 1: the model split over that many CPU ranks (model/tensor_parallel_model.h).
inline const model::Model& cached_model(const std::string& spec, const model::ModelOptions& options = {},
                                        int tensor_parallel_size = 1) {
  static_assert(sizeof(model::ModelOptions) == sizeof(model::MoeRoutingPattern),
                "a new model option must join the cache key below");
  static std::mutex mutex;  // a test may load from several threads
  static std::map<std::tuple<std::string, model::MoeRoutingPattern, int>, std::unique_ptr<model::Model>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& m = cache[{spec, options.moe_routing, tensor_parallel_size}];
  if (!m) {
    const bool as_is = spec.rfind("builtin:", 0) == 0 || spec.rfind('/', 0) == 0;
    m = model::load_model(model::open_checkpoint(as_is ? spec : std::string(PARITY_TEST_DATA) + "/" + spec),
                          tensor_parallel_size, options);
  }
  return *m;
}

inline const model::Model& tiny_model() { return cached_model("builtin:tiny"); }
inline const model::Model& tiny_hybrid_model() { return cached_model("builtin:tiny-hybrid"); }

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// A fixture whose every test gets a scratch folder of its own, removed after it.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';  // parameterised names hold '/'
    dir_ = scratch_dir(name);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `text` to the file `name` in the folder; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    write_text(dir_ / name, text);
    return path(name);
  }
  std::filesystem::path dir_;
};

// The name of a parameterised test whose parameter is "builtin:NAME": NAME with '-' as '_' (test
// names take neither ':' nor '-').
inline std::string builtin_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param.substr(std::string("builtin:").size());
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

struct CliResult {
  int status = -1;
  std::string out, err;
};

// Runs `parity ARGS` (already shell-quoted) and captures stdout / stderr.
inline CliResult run_cli(const std::string& args) {
  auto dir = scratch_dir("cli");
  std::string cmd = std::string(PARITY_BINARY) + " " + args + " >" + (dir / "out").string() + " 2>" +
                    (dir / "err").string();
  int rc = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.out = read_file(dir / "out");
  r.err = read_file(dir / "err");
  std::filesystem::remove_all(dir);
  return r;
}

// n floats uniform in [lo, hi), the same for the same seed.
inline std::vector<float> random_floats(std::size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = ud(rng);
  return v;
}

// n token ids uniform in [0, vocab), drawn from `rng`.
inline std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
  return t;
}

// The same for the same seed.
inline std::vector<int32_t> random_tokens(uint32_t seed, int n, int vocab) {
  std::mt19937 rng(seed);
  return random_tokens(rng, n, vocab);
}

// Token ids as the command line takes them: "1,2,3".
inline std::string id_list(std::span<const int32_t> ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

// The "logits" tensor of a safetensors file parity wrote (score --out, generate --dump-logits);
// empty if it has none or not F32, which the callers' size checks report.
inline std::vector<float> read_logits(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  const io::TensorView* t = f->find("logits");
  if (!t || t->dtype != DType::F32) return {};
  const float* p = static_cast<const float*>(t->data);
  return std::vector<float>(p, p + t->numel());
}

// How many of n floats differ in their bits.
inline std::size_t count_bit_mismatches(const float* a, const float* b, std::size_t n) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += std::memcmp(a + i, b + i, sizeof(float)) != 0;
  return bad;
}

// Prompt s[0, prompt_len), the rest of s teacher-forced, every logit row returned (prompt rows
// included): a request whose rows line up one for one with single-shot scoring of s.
inline engine::RequestSpec teacher_forced_all_rows(const std::vector<int32_t>& s, int prompt_len) {
  engine::RequestSpec r;
  r.prompt.assign(s.begin(), s.begin() + prompt_len);
  r.forced.assign(s.begin() + prompt_len, s.end());
  r.return_logits = true;
  r.return_prompt_logits = true;
  return r;
}

}  // namespace parity::test
