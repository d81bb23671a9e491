#include "kernel_timeline.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#if PARITY_HAVE_CUPTI
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <cxxabi.h>
#endif

namespace parity::bench {

#if PARITY_HAVE_CUPTI
namespace {

struct Record {
  uint64_t start, end;
  std::string name;
};
std::vector<Record>& records() {
  static std::vector<Record> r;
  return r;
}

constexpr std::size_t kBufferBytes = std::size_t(8) << 20;
constexpr std::size_t kAlign = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    records().push_back({k->start, k->end, k->name != nullptr ? k->name : "?"});
  }
  std::free(buffer);
}

// "void parity::cuda::(anonymous namespace)::ssu_kernel(...)" -> "ssu_kernel", templates kept, cut.
std::string short_name(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  std::string s = status == 0 && d ? std::string(d.get()) : mangled;
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  for (const std::string drop : {"parity::cuda::", "(anonymous namespace)::"}) {
    for (auto p = s.find(drop); p != std::string::npos; p = s.find(drop)) s.erase(p, drop.size());
  }
  if (const auto p = s.find('('); p != std::string::npos) s.resize(p);
  if (s.size() > 96) s.resize(96);
  return s;
}

}  // namespace

bool kernel_timeline_start(std::string* why) {
  records().clear();
  static bool registered = false;
  if (!registered) {
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
      if (why) *why = "cuptiActivityRegisterCallbacks failed";
      return false;
    }
    registered = true;
  }
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    if (why) *why = "cuptiActivityEnable(CONCURRENT_KERNEL) failed";
    return false;
  }
  return true;
}

KernelTimeline kernel_timeline_finish(int steps, int layers) {
  KernelTimeline t;
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(1);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::vector<Record> r = std::move(records());
  records().clear();
  if (r.empty() || steps <= 0 || r.size() % static_cast<std::size_t>(steps) != 0) {
    t.why = "kernel records: " + std::to_string(r.size()) + " for " + std::to_string(steps) + " steps";
    return t;
  }
  std::sort(r.begin(), r.end(), [](const Record& a, const Record& b) { return a.start < b.start; });
  const int per = static_cast<int>(r.size()) / steps;
  t.steps = steps;
  t.kernels_per_step = per;
  // Keys from the first step: a name's launches a step, then each launch's turn.
  std::map<std::string, int> count;
  std::vector<std::string> names(static_cast<std::size_t>(per));
  for (int i = 0; i < per; ++i) ++count[names[i] = short_name(r[static_cast<std::size_t>(i)].name)];
  std::vector<std::string> keys(static_cast<std::size_t>(per));
  std::map<std::string, int> seen;
  // A name launched at least once a layer has c / layers turns (in_proj, out_proj); its launches past
  // turns × layers (the head after the layers' GEMMs) and a name launched fewer times (the embedding,
  // the first and last norms) are keyed one by one.
  for (int i = 0; i < per; ++i) {
    const int c = count[names[i]], turns = c >= layers ? c / layers : 0, n = seen[names[i]]++;
    keys[i] = names[i] + (n < turns * layers ? "#" + std::to_string(n % turns) : "@" + std::to_string(n));
  }
  std::map<std::string, std::size_t> row_of;
  for (int i = 0; i < per; ++i) {
    if (row_of.count(keys[i])) continue;
    row_of[keys[i]] = t.rows.size();
    KernelTimelineRow row;
    row.key = keys[i];
    row.first_index = i;
    t.rows.push_back(row);
  }
  std::vector<int> launches(t.rows.size(), 0);
  for (int s = 0; s < steps; ++s) {
    const Record* q = r.data() + static_cast<std::size_t>(s) * per;
    uint64_t last_end = q[0].start;
    for (int i = 0; i < per; ++i) {
      if (q[i].name != r[static_cast<std::size_t>(i)].name) {  // the mangled names: no demangling a record
        t.rows.clear();
        t.why = "step " + std::to_string(s) + " kernel " + std::to_string(i) + " differs from the first step's";
        return t;
      }
      KernelTimelineRow& row = t.rows[row_of[keys[i]]];
      const uint64_t end = std::max(q[i].end, last_end);  // the frontier never runs back
      row.path_us += static_cast<double>(end - last_end) * 1e-3;
      row.life_us += static_cast<double>(q[i].end - q[i].start) * 1e-3;
      row.lead_us += (static_cast<double>(last_end) - static_cast<double>(q[i].start)) * 1e-3;
      ++launches[row_of[keys[i]]];
      last_end = end;
    }
    t.step_us += static_cast<double>(last_end - q[0].start) * 1e-3;
  }
  for (std::size_t k = 0; k < t.rows.size(); ++k) {
    KernelTimelineRow& row = t.rows[k];
    row.per_step = launches[k] / steps;
    row.path_us /= steps;
    row.life_us /= std::max(1, launches[k]);
    row.lead_us /= std::max(1, launches[k]);
  }
  t.step_us /= steps;
  t.available = true;
  return t;
}

#else

bool kernel_timeline_start(std::string* why) {
  if (why) *why = "built without CUPTI";
  return false;
}
KernelTimeline kernel_timeline_finish(int, int) {
  KernelTimeline t;
  t.why = "built without CUPTI";
  return t;
}

#endif

std::string kernel_timeline_csv(const KernelTimeline& t) {
  std::string out = "key,first_index,per_step,path_us,life_us,lead_us\n";
  char buf[96];
  for (const KernelTimelineRow& r : t.rows) {
    std::snprintf(buf, sizeof buf, ",%d,%d,%.3f,%.3f,%.3f\n", r.first_index, r.per_step, r.path_us, r.life_us,
                  r.lead_us);
    out += "\"" + r.key + "\"" + buf;
  }
  return out;
}

}  // namespace parity::bench
