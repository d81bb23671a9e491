#include "cache/planner.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"

namespace parity::cache {

static std::string mib(std::size_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

std::string CachePlan::describe() const {
  std::string s = "state cache: " + std::to_string(num_slots) + " slots × " + mib(per_seq.total()) + " = " +
                  mib(total_bytes()) + "\n";
  s += "  per sequence: conv " + mib(per_seq.conv) + ", ssm " + mib(per_seq.ssm) + ", running fold " +
       mib(per_seq.running) + ", replay buffers " + mib(per_seq.replay) + ", total " + mib(per_seq.total()) + "\n";
  return s;
}

CachePlan plan_cache(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt,
                     std::size_t budget_bytes, int max_num_seqs) {
  validate(opt);
  CachePlan p;
  p.per_seq = slot_bytes(cfg, num_mamba_layers, opt);
  if (max_num_seqs < 1) throw Error("max_num_seqs must be at least 1");
  if (budget_bytes == 0) {
    p.num_slots = max_num_seqs;
  } else {
    std::size_t fit = budget_bytes / std::max<std::size_t>(1, p.per_seq.total());
    if (fit == 0)
      throw Error("state cache budget of " + mib(budget_bytes) + " holds no sequence: one needs " +
                  mib(p.per_seq.total()));
    p.num_slots = static_cast<int>(std::min<std::size_t>(fit, static_cast<std::size_t>(max_num_seqs)));
  }
  return p;
}

}  // namespace parity::cache
