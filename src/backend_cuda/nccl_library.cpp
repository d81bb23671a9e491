#include "backend_cuda/nccl_library.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "common/error.h"

namespace parity::backend_cuda::nccl {
namespace {

constexpr const char* kSoname = "libnccl.so.2";
constexpr const char* kWheelLib = "nvidia/nccl/lib/libnccl.so.2";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Every existing path matching pattern, sorted (glob's order).
void add_glob(const std::string& pattern, std::vector<std::string>& out) {
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
}

// A symbol's address as the function pointer type it is declared with (POSIX allows the cast).
template <typename F>
bool resolve(void* handle, const char* name, F& f, std::string& missing) {
  void* p = dlsym(handle, name);
  if (!p) {
    if (!missing.empty()) missing += ", ";
    missing += name;
    return false;
  }
  f = reinterpret_cast<F>(p);
  return true;
}

}  // namespace

void Library::check(Result r, const char* what) const {
  if (r == 0) return;
  const char* msg = get_error_string ? get_error_string(r) : nullptr;
  throw Error(std::string("NCCL: ") + what + ": " + (msg ? msg : "error " + std::to_string(r)));
}

std::vector<std::string> candidates() {
  const std::string forced = env("PARITY_NCCL_LIBRARY");
  if (!forced.empty()) return {forced};
  std::vector<std::string> c{kSoname};
  for (const char* prefix : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const std::string p = env(prefix);
    if (p.empty()) continue;
    add_glob(p + "/lib/python3*/site-packages/" + kWheelLib, c);
    add_glob(p + "/lib/" + kSoname, c);
  }
  if (const std::string home = env("HOME"); !home.empty())
    add_glob(home + "/.local/lib/python3*/site-packages/" + kWheelLib, c);
  for (const char* root : {"/usr/local/lib", "/usr/lib", "/opt/conda/lib"}) {
    add_glob(std::string(root) + "/python3*/site-packages/" + kWheelLib, c);
    add_glob(std::string(root) + "/python3*/dist-packages/" + kWheelLib, c);
  }
  add_glob("/usr/lib/python3/dist-packages/" + std::string(kWheelLib), c);
  std::stringstream pp(env("PYTHONPATH"));
  for (std::string dir; std::getline(pp, dir, ':');)
    if (!dir.empty()) add_glob(dir + "/" + kWheelLib, c);
  return c;
}

std::shared_ptr<const Library> load(const std::vector<std::string>& cands) {
  std::string tried;
  for (const std::string& path : cands) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why ? why : "cannot be opened");
      continue;
    }
    auto lib = std::make_shared<Library>();
    lib->path = path;
    std::string missing;
    resolve(h, "ncclGetUniqueId", lib->get_unique_id, missing);
    resolve(h, "ncclCommInitRank", lib->comm_init_rank, missing);
    resolve(h, "ncclAllGather", lib->all_gather, missing);
    resolve(h, "ncclGroupStart", lib->group_start, missing);
    resolve(h, "ncclGroupEnd", lib->group_end, missing);
    resolve(h, "ncclCommDestroy", lib->comm_destroy, missing);
    resolve(h, "ncclCommAbort", lib->comm_abort, missing);
    resolve(h, "ncclGetErrorString", lib->get_error_string, missing);
    if (missing.empty()) return lib;  // NCCL stays loaded for the process's life: it is never dlclosed
    dlclose(h);
    tried += "\n  " + path + ": opened, but it lacks " + missing + " (not NCCL?)";
  }
  throw Error(std::string("NCCL could not be loaded: no usable ") + kSoname + " (tried:" +
              (tried.empty() ? std::string(" nothing") : tried) +
              ")\nInstall NCCL (e.g. pip install nvidia-nccl-cu12, which PyTorch brings) or set PARITY_NCCL_LIBRARY "
              "to the path of libnccl.so.2");
}

std::shared_ptr<const Library> library() {
  static std::mutex mu;
  static std::shared_ptr<const Library> lib;
  std::lock_guard<std::mutex> lock(mu);
  if (!lib) lib = load(candidates());
  return lib;
}

}  // namespace parity::backend_cuda::nccl
