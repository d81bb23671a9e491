#pragma once
// Helpers for the replacement and validation tests: probe hooks of the tests' own (recording rows
// by (request, position), adding a perturbation, chaining two hooks), so these tests do not depend
// on the capture command's code.
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "accuracy/captures_file.h"
#include "model/model.h"

namespace parity::test {

// Records the rows of chosen modules per (request, position); notes whether any pass mixed
// several sequences with a multi-token chunk and a one-token decode.
class RowRecorder : public model::ProbeHooks {
 public:
  explicit RowRecorder(std::set<std::string> modules) : modules_(std::move(modules)) {}
  bool wants(const std::string& name) const override { return modules_.count(name) != 0; }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) override {
    bool multi = false, single = false;
    for (const auto& s : meta.batch->seqs) (s.n > 1 ? multi : single) = true;
    mixed_pass = mixed_pass || (multi && single);
    for (int t = 0; t < rows; ++t) {
      auto& row = rows_[name][{meta.request(t), meta.position[static_cast<std::size_t>(t)]}];
      row.assign(data + static_cast<std::size_t>(t) * cols, data + static_cast<std::size_t>(t + 1) * cols);
    }
  }
  // Flat [positions, E] of one request's stream; every position 0..n-1 must have been seen.
  accuracy::Matrix matrix(const std::string& module, uint64_t request) const {
    accuracy::Matrix m;
    const auto& rows = rows_.at(module);
    for (int64_t p = 0;; ++p) {
      auto it = rows.find({request, p});
      if (it == rows.end()) break;
      m.cols = static_cast<int64_t>(it->second.size());
      m.data.insert(m.data.end(), it->second.begin(), it->second.end());
      ++m.rows;
    }
    return m;
  }
  bool mixed_pass = false;

 private:
  std::set<std::string> modules_;
  std::map<std::string, std::map<std::pair<uint64_t, int64_t>, std::vector<float>>> rows_;
};

// The perturbation the tests inject: a function of (reference prompt, position, column) only.
inline float perturbation(int prompt, int64_t pos, int64_t col) {
  return 0.05f * std::sin(0.7f * static_cast<float>(col) + 1.3f * static_cast<float>(pos) + static_cast<float>(prompt));
}

// Adds the perturbation in place at one module; request → prompt given by the caller.
class PerturbHooks : public model::ProbeHooks {
 public:
  PerturbHooks(std::string module, std::map<uint64_t, int> prompt_of) : module_(std::move(module)), prompt_of_(std::move(prompt_of)) {}
  bool wants(const std::string& name) const override { return name == module_; }
  void visit(const std::string&, float* data, int rows, int cols, const model::ProbeRows& meta) override {
    for (int t = 0; t < rows; ++t) {
      const int p = prompt_of_.at(meta.request(t));
      for (int c = 0; c < cols; ++c)
        data[static_cast<std::size_t>(t) * cols + c] += perturbation(p, meta.position[static_cast<std::size_t>(t)], c);
    }
  }

 private:
  std::string module_;
  std::map<uint64_t, int> prompt_of_;
};

class ChainHooks : public model::ProbeHooks {
 public:
  ChainHooks(model::ProbeHooks& a, model::ProbeHooks& b) : a_(a), b_(b) {}
  bool wants(const std::string& n) const override { return a_.wants(n) || b_.wants(n); }
  void visit(const std::string& n, float* d, int r, int c, const model::ProbeRows& m) override {
    if (a_.wants(n)) a_.visit(n, d, r, c, m);
    if (b_.wants(n)) b_.visit(n, d, r, c, m);
  }

 private:
  model::ProbeHooks& a_;
  model::ProbeHooks& b_;
};

}  // namespace parity::test
