// The NCCL loader (backend_cuda/nccl_library.h) without a GPU: parity opens libnccl.so.2 at run time, and
// where it is absent (this build machine) or something else sits at the path, it refuses with a message
// that names the library, what was tried and why, and how to point parity at it. Also: the CUDA backend
// refuses a tensor-parallel split that does not fit exactly as the CPU does, before it needs a device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "backend_cuda/backend.h"
#include "backend_cuda/nccl_library.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/tensor_parallel_model.h"

using namespace parity;
namespace nccl = parity::backend_cuda::nccl;

namespace {

// Sets an environment variable for a scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string nccl_load_error(const std::vector<std::string>& candidates) {
  try {
    nccl::load(candidates);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NcclLibrary, AnOverridePathIsTheOnlyCandidate) {
  ScopedEnv e("PARITY_NCCL_LIBRARY", "/opt/somewhere/libnccl.so.2");
  EXPECT_EQ(nccl::candidates(), std::vector<std::string>{"/opt/somewhere/libnccl.so.2"});
}

TEST(NcclLibrary, WithoutOverrideTheLoaderPathComesFirst) {
  ScopedEnv e("PARITY_NCCL_LIBRARY", nullptr);
  const auto c = nccl::candidates();
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.front(), "libnccl.so.2");
  for (std::size_t i = 1; i < c.size(); ++i) EXPECT_NE(c[i].find("libnccl.so.2"), std::string::npos) << c[i];
}

TEST(NcclLibrary, AMissingLibraryIsRefusedNamingItAndTheOverride) {
  ScopedEnv e("PARITY_NCCL_LIBRARY", "/nonexistent/parity-test/libnccl.so.2");
  const std::string msg = nccl_load_error(nccl::candidates());
  EXPECT_NE(msg.find("NCCL could not be loaded: no usable libnccl.so.2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent/parity-test/libnccl.so.2: "), std::string::npos) << msg;  // with dlerror's why
  EXPECT_NE(msg.find("PARITY_NCCL_LIBRARY"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nvidia-nccl-cu12"), std::string::npos) << msg;
}

// The companion: a library that opens but is not NCCL is refused too, naming the entry points it lacks
// (so a load that succeeds has resolved every one of them).
TEST(NcclLibrary, ALibraryWithoutTheEntryPointsIsRefusedNamingThem) {
  const std::string msg = nccl_load_error({"libm.so.6"});
  EXPECT_NE(msg.find("libm.so.6: opened, but it lacks ncclGetUniqueId"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ncclGetErrorString"), std::string::npos) << msg;
  EXPECT_NE(nccl_load_error({}).find("tried: nothing"), std::string::npos);
}

// Where NCCL is absent (the build machine) the default search fails with the same kind of message; where it
// is installed (a GPU machine with PyTorch) it loads.
TEST(NcclLibrary, TheDefaultSearchLoadsOrSaysWhatItTried) {
  ScopedEnv e("PARITY_NCCL_LIBRARY", nullptr);
  try {
    const auto lib = nccl::load(nccl::candidates());
    std::fprintf(stderr, "[ nccl     ] loaded %s\n", lib->path.c_str());
    EXPECT_NE(lib->path.find("libnccl.so.2"), std::string::npos);
  } catch (const Error& err) {
    const std::string msg = err.what();
    std::fprintf(stderr, "[ nccl     ] not here: %s\n", msg.c_str());
    EXPECT_NE(msg.find("no usable libnccl.so.2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\n  libnccl.so.2: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("PARITY_NCCL_LIBRARY"), std::string::npos) << msg;
  }
}

std::string split_error(const std::string& spec, int tp, bool cuda) {
  try {
    const model::Checkpoint ck = model::open_checkpoint(spec);
    if (cuda) backend_cuda::load_model(ck, tp, {});
    else model::load_model(ck, tp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// GPU ranks split the checkpoint by the CPU's plan, and check it before they touch a device: the same
// message, on a machine without a GPU too.
TEST(CudaTensorParallelSplit, ABadSplitIsRefusedAsOnTheCpuBeforeAnyDevice) {
  if (!backend_cuda::built_with_cuda()) GTEST_SKIP() << "built without CUDA: --device cuda is refused first";
  for (const auto& [spec, tp] : std::vector<std::pair<std::string, int>>{
           {"builtin:tiny", 2}, {"builtin:tiny-g2", 4}, {"builtin:tiny-hybrid", 2}}) {
    SCOPED_TRACE(spec + " tp " + std::to_string(tp));
    const std::string cpu = split_error(spec, tp, false), gpu = split_error(spec, tp, true);
    EXPECT_NE(cpu.find("would cut a Mamba group"), std::string::npos) << cpu;
    EXPECT_EQ(gpu, cpu);
  }
}

}  // namespace
