#include "accuracy/tensor_replacer.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "common/error.h"

namespace parity::accuracy {

MissingPosition missing_position_from_name(const std::string& s) {
  if (s == "error") return MissingPosition::Error;
  if (s == "zero") return MissingPosition::Zero;
  throw Error("tensor replacement: on_missing_position must be \"error\" or \"zero\", not \"" + s + "\"");
}

const char* missing_position_name(MissingPosition p) { return p == MissingPosition::Zero ? "zero" : "error"; }

TensorReplacer::TensorReplacer(std::vector<std::map<std::string, Matrix>> flat,
                               std::vector<std::vector<int32_t>> prompt_ids, MissingPosition policy)
    : flat_(std::move(flat)), policy_(policy) {
  if (flat_.empty()) throw Error("tensor replacement: the reference holds no prompts");
  if (prompt_ids.size() != flat_.size())
    throw Error("tensor replacement: " + std::to_string(prompt_ids.size()) + " prompt token lists for " +
                std::to_string(flat_.size()) + " reference prompts");
  for (const auto& [name, m] : flat_[0]) {
    modules_.push_back(name);
    features_[name] = m.cols;
  }
  if (modules_.empty()) throw Error("tensor replacement: reference prompt 0 holds no tensors");
  for (std::size_t i = 0; i < flat_.size(); ++i) {
    const auto& mods = flat_[i];
    for (const auto& [name, m] : mods) {
      auto f = features_.find(name);
      if (f == features_.end())
        throw Error("tensor replacement: reference prompt " + std::to_string(i) + " holds " + name +
                    ", which prompt 0 does not (every prompt needs the same modules)");
      if (m.cols != f->second)
        throw Error("tensor replacement: " + name + " has " + std::to_string(m.cols) + " features in prompt " +
                    std::to_string(i) + " but " + std::to_string(f->second) + " in prompt 0");
      if (m.data.size() != static_cast<std::size_t>(m.rows * m.cols))
        throw Error("tensor replacement: " + name + " of prompt " + std::to_string(i) + " claims [" +
                    std::to_string(m.rows) + ", " + std::to_string(m.cols) + "] but holds " +
                    std::to_string(m.data.size()) + " values");
    }
    for (const auto& name : modules_)
      if (!mods.count(name))
        throw Error("tensor replacement: reference prompt " + std::to_string(i) + " lacks " + name +
                    " (every prompt needs the same modules)");
  }
  index_ = PromptIndex(std::move(prompt_ids));
}

TensorReplacer TensorReplacer::from_captures(const Captures& c, MissingPosition policy) {
  std::vector<std::map<std::string, Matrix>> flat;
  std::vector<std::vector<int32_t>> ids;
  for (const PromptCapture& p : c.prompts) {
    flat.push_back(flatten(p));
    ids.push_back(p.prompt_token_ids);
  }
  return TensorReplacer(std::move(flat), std::move(ids), policy);
}

int64_t TensorReplacer::feature_size(const std::string& module) const {
  auto it = features_.find(module);
  if (it == features_.end()) throw Error("tensor replacement: the reference holds no module " + module);
  return it->second;
}

const Matrix& TensorReplacer::reference(int prompt, const std::string& module) const {
  if (prompt < 0 || static_cast<std::size_t>(prompt) >= flat_.size())
    throw Error("tensor replacement: no reference prompt " + std::to_string(prompt));
  auto it = flat_[prompt].find(module);
  if (it == flat_[prompt].end()) throw Error("tensor replacement: the reference holds no module " + module);
  return it->second;
}

void TensorReplacer::restrict_to(const std::vector<std::string>& modules) {
  std::set<std::string> keep;
  for (const auto& m : modules) {
    if (!features_.count(m)) {
      std::string have;
      for (const auto& n : modules_) have += (have.empty() ? "" : ", ") + n;
      throw Error("tensor replacement: module filter names " + m + ", which the reference does not hold (it holds: " +
                  have + ")");
    }
    keep.insert(m);
  }
  std::vector<std::string> kept;
  for (const auto& m : modules_)
    if (keep.count(m)) kept.push_back(m);
    else features_.erase(m);
  modules_ = std::move(kept);
  for (auto& mods : flat_)
    for (auto it = mods.begin(); it != mods.end();) it = keep.count(it->first) ? std::next(it) : mods.erase(it);
}

void TensorReplacer::fill_row(const std::string& module, uint64_t request, int64_t position, float* dst) {
  const int prompt = index_.resolve(request);
  const Matrix& ref = reference(prompt, module);
  const std::size_t E = static_cast<std::size_t>(ref.cols);
  if (position >= 0 && position < ref.rows) {
    std::memcpy(dst, ref.row(position), E * sizeof(float));
    ++stats_.rows_replaced;
    return;
  }
  ++stats_.rows_past_reference;
  if (policy_ == MissingPosition::Error)
    throw Error("tensor replacement: request " + std::to_string(request) + " (reference prompt " +
                std::to_string(prompt) + ") needs " + module + " at position " + std::to_string(position) +
                " but the reference covers positions 0.." + std::to_string(ref.rows - 1) +
                "; set \"on_missing_position\": \"zero\" to zero-fill such rows");
  std::memset(dst, 0, E * sizeof(float));
}

ReplacementContext TensorReplacer::build_context(const std::vector<uint64_t>& req_ids,
                                                 const std::vector<int64_t>& positions, bool is_prefill,
                                                 int tokens_per_req) {
  if (tokens_per_req < 1) throw Error("tensor replacement: tokens_per_req must be at least 1");
  if (req_ids.empty()) return {};
  ReplacementContext ctx = warmup_context(static_cast<int>(positions.size()));
  auto fill = [&](std::size_t slot, uint64_t req) {
    for (auto& [name, m] : ctx) fill_row(name, req, positions[slot], m.data.data() + slot * m.cols);
  };
  if (is_prefill) {
    // The runner pads a prefill by repeating positions, so the first repeat ends the real rows.
    std::set<int64_t> seen;
    for (std::size_t s = 0; s < positions.size(); ++s) {
      if (!seen.insert(positions[s]).second) break;
      fill(s, req_ids[0]);
    }
    return ctx;
  }
  const std::size_t real = req_ids.size() * static_cast<std::size_t>(tokens_per_req);
  for (std::size_t s = 0; s < positions.size() && s < real; ++s) fill(s, req_ids[s / tokens_per_req]);
  return ctx;
}

ReplacementContext TensorReplacer::warmup_context(int num_tokens) const {
  if (num_tokens < 0) throw Error("tensor replacement: negative token count");
  ReplacementContext ctx;
  for (const auto& m : modules_) {
    Matrix& z = ctx[m];
    z.rows = num_tokens;
    z.cols = features_.at(m);
    z.data.assign(static_cast<std::size_t>(z.rows * z.cols), 0.0f);
  }
  return ctx;
}

}  // namespace parity::accuracy
