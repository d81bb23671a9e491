#include "accuracy/capture_hooks.h"

#include <algorithm>
#include <cstring>

#include "accuracy/hooks_identity.h"
#include "common/error.h"

namespace parity::accuracy {

CaptureHooks::CaptureHooks(const std::vector<std::string>& modules)
    : identity_(new_hooks_identity()), wanted_(modules.begin(), modules.end()) {}

void CaptureHooks::on_prefix_reuse(uint64_t request, uint64_t source, int64_t length) {
  for (const std::string& m : wanted_) {
    auto src = rows_.find({source, m});
    if (src == rows_.end()) continue;  // build() names the missing rows if they are ever needed
    const Rows& s = src->second;  // std::map: the insertion below moves no node
    Rows& d = rows_[{request, m}];
    if (d.cols == 0) d.cols = s.cols;
    const std::size_t n = std::min(static_cast<std::size_t>(length), s.seen.size());
    if (d.seen.size() < n) {
      d.seen.resize(n, 0);
      d.data.resize(n * static_cast<std::size_t>(d.cols));
    }
    std::copy(s.data.begin(), s.data.begin() + static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(s.cols)),
              d.data.begin());
    std::copy(s.seen.begin(), s.seen.begin() + static_cast<std::ptrdiff_t>(n), d.seen.begin());
  }
}

void CaptureHooks::on_rows_discarded(uint64_t request, int64_t from) {
  for (const std::string& m : wanted_) {
    auto it = rows_.find({request, m});
    if (it == rows_.end()) continue;
    for (std::size_t p = static_cast<std::size_t>(std::max<int64_t>(0, from)); p < it->second.seen.size(); ++p)
      it->second.seen[p] = 0;
  }
}

void CaptureHooks::visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) {
  Rows* cur = nullptr;
  uint64_t cur_req = 0;
  for (int r = 0; r < rows; ++r) {
    const uint64_t req = meta.request(r);
    if (!cur || req != cur_req) {  // rows of one request are contiguous in a pass
      cur = &rows_[{req, name}];
      cur_req = req;
      if (cur->cols == 0) cur->cols = cols;
      if (cur->cols != cols)
        throw Error("capture: " + name + " changed width from " + std::to_string(cur->cols) + " to " + std::to_string(cols));
    }
    const int64_t pos = meta.position[static_cast<std::size_t>(r)];
    const std::size_t need = static_cast<std::size_t>(pos + 1);
    if (cur->seen.size() < need) {
      cur->seen.resize(std::max(need, cur->seen.size() * 2), 0);
      cur->data.resize(cur->seen.size() * static_cast<std::size_t>(cols));
    }
    std::memcpy(cur->data.data() + static_cast<std::size_t>(pos) * cols, data + static_cast<std::size_t>(r) * cols,
                static_cast<std::size_t>(cols) * 4);
    cur->seen[static_cast<std::size_t>(pos)] = 1;
  }
}

PromptCapture CaptureHooks::build(uint64_t request, const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& continuation, int64_t positions,
                                  CaptureLayout layout) const {
  const int64_t P = static_cast<int64_t>(prompt.size());
  if (positions < P) throw Error("capture: asked for " + std::to_string(positions) + " positions, fewer than the prompt");
  PromptCapture out;
  out.prompt_token_ids = prompt;
  out.continuation_token_ids = continuation;
  for (const std::string& m : wanted_) {
    auto it = rows_.find({request, m});
    if (it == rows_.end()) throw Error("capture: " + m + " was never visited for request " + std::to_string(request));
    const Rows& r = it->second;
    for (int64_t p = 0; p < positions; ++p)
      if (static_cast<std::size_t>(p) >= r.seen.size() || !r.seen[static_cast<std::size_t>(p)])
        throw Error("capture: " + m + " has no row for position " + std::to_string(p) + " of request " +
                    std::to_string(request));
    const float* base = r.data.data();
    const std::size_t w = static_cast<std::size_t>(r.cols);
    if (layout == CaptureLayout::Flat) {
      out.flat[m] = Matrix{positions, r.cols, std::vector<float>(base, base + static_cast<std::size_t>(positions) * w)};
      continue;
    }
    auto& steps = out.steps[m];
    steps.push_back(Matrix{P, r.cols, std::vector<float>(base, base + static_cast<std::size_t>(P) * w)});
    for (int64_t p = P; p < positions; ++p)
      steps.push_back(Matrix{1, r.cols, std::vector<float>(base + p * w, base + (p + 1) * w)});
  }
  return out;
}

}  // namespace parity::accuracy
