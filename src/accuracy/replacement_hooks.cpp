#include "accuracy/replacement_hooks.h"

#include <cstring>
#include <vector>

#include "accuracy/active_context.h"
#include "accuracy/hooks_identity.h"
#include "common/error.h"

namespace parity::accuracy {

namespace {

void check_features(const std::string& name, int64_t ref_cols, int live_cols) {
  if (ref_cols != live_cols)
    throw Error("tensor replacement: " + name + " has " + std::to_string(ref_cols) +
                " features in the reference but " + std::to_string(live_cols) + " in the live tensor");
}

}  // namespace

ReplacementHooks::ReplacementHooks(TensorReplacer& replacer) : r_(replacer), identity_(new_hooks_identity()) {}

std::optional<uint64_t> ReplacementHooks::prefix_identity(uint64_t request) {
  return combine_identities(identity_, static_cast<uint64_t>(r_.resolve(request)));
}

void ReplacementHooks::visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) {
  check_features(name, r_.feature_size(name), cols);
  if (static_cast<int>(meta.position.size()) != rows)
    throw Error("tensor replacement: " + name + " has " + std::to_string(rows) + " rows but the pass metadata " +
                std::to_string(meta.position.size()));
  for (int t = 0; t < rows; ++t) {
    const uint64_t req = meta.request(t);
    const int64_t pos = meta.position[static_cast<std::size_t>(t)];
    float* dst = data + static_cast<std::size_t>(t) * static_cast<std::size_t>(cols);
    if (meta.is_draft(t) && !r_.covers(name, req, pos)) {
      std::memset(dst, 0, static_cast<std::size_t>(cols) * sizeof(float));
      auto [it, fresh] = draft_past_.try_emplace(req, pos, name);
      if (!fresh && pos < it->second.first) it->second = {pos, name};
      continue;
    }
    r_.fill_row(name, req, pos, dst);
  }
}

void ReplacementHooks::on_rows_discarded(uint64_t request, int64_t from) {
  auto it = draft_past_.find(request);
  if (it == draft_past_.end()) return;
  const auto [pos, module] = it->second;
  draft_past_.erase(it);
  if (pos >= from) return;  // only rejected drafts went past the reference
  std::vector<float> row(static_cast<std::size_t>(r_.feature_size(module)));
  r_.fill_row(module, request, pos, row.data());  // the error, or a counted zero row, as without drafts
}

bool ReplacementHooks::fetch_replacement(const std::string& name, float* dst, int rows, int cols,
                                        const model::ProbeRows& meta) {
  if (!r_.has_module(name)) return false;
  visit(name, dst, rows, cols, meta);
  return true;
}

bool ContextHooks::wants(const std::string& name) const { return get_replacement_tensor(name) != nullptr; }

void ContextHooks::visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows&) {
  const Matrix* m = get_replacement_tensor(name);
  if (!m) return;
  check_features(name, m->cols, cols);
  if (m->rows < rows)
    throw Error("tensor replacement: the context for " + name + " has " + std::to_string(m->rows) +
                " slots but the pass has " + std::to_string(rows) + " rows");
  std::memcpy(data, m->data.data(), static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(float));
}

bool ContextHooks::fetch_replacement(const std::string& name, float* dst, int rows, int cols,
                                    const model::ProbeRows& meta) {
  if (!get_replacement_tensor(name)) return false;
  visit(name, dst, rows, cols, meta);
  return true;
}

}  // namespace parity::accuracy
