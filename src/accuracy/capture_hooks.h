#pragma once
// Probe hooks that keep the rows of selected probe points, per (request, absolute position).
// Under preemption and recompute a position is visited again: the latest visit wins (in exact
// mode the visits are bit-identical, so which one is kept does not matter there).
// Prefix caching: a request that starts from cached state takes the rows of the positions it
// skips from the request whose computation made that state (same tokens, same identity: in exact
// mode the very bits it would have computed). Speculative decoding: rows of rejected drafts are
// forgotten.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "accuracy/captures_file.h"
#include "model/probe.h"

namespace parity::accuracy {

class CaptureHooks : public model::ProbeHooks {
 public:
  explicit CaptureHooks(const std::vector<std::string>& modules);

  bool wants(const std::string& name) const override { return wanted_.count(name) != 0; }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) override;
  std::optional<uint64_t> prefix_identity(uint64_t) override { return identity_; }
  void on_prefix_reuse(uint64_t request, uint64_t source, int64_t length) override;
  void on_rows_discarded(uint64_t request, int64_t from) override;

  // One request's rows for positions 0 … positions-1 as a prompt capture in `layout`: flat
  // [positions, E]; step: step 0 = the prompt's rows, step k = the row of position P+k-1.
  // Throws parity::Error when a position was never visited.
  PromptCapture build(uint64_t request, const std::vector<int32_t>& prompt, const std::vector<int32_t>& continuation,
                      int64_t positions, CaptureLayout layout) const;

 private:
  struct Rows {
    int cols = 0;
    std::vector<float> data;  // row p at p * cols
    std::vector<char> seen;
  };
  uint64_t identity_;
  std::set<std::string> wanted_;
  std::map<std::pair<uint64_t, std::string>, Rows> rows_;
};

}  // namespace parity::accuracy
