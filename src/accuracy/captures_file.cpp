#include "accuracy/captures_file.h"

#include <cstring>
#include <limits>
#include <set>

#include "accuracy/module_order.h"
#include "common/error.h"
#include "io/safetensors.h"

namespace parity::accuracy {
namespace {

const char* layout_name(CaptureLayout l) { return l == CaptureLayout::Step ? "step" : "flat"; }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from <= s.size()) {
    std::size_t c = s.find(',', from);
    if (c == std::string::npos) c = s.size();
    out.push_back(s.substr(from, c - from));
    from = c + 1;
  }
  return out;
}

// "p12" → 12; -1 when the text is not a canonical prompt index.
int64_t prompt_index(const std::string& s) {
  if (s.size() < 2 || s.size() > 10 || s[0] != 'p') return -1;
  for (std::size_t i = 1; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return -1;
  if (s.size() > 2 && s[1] == '0') return -1;
  return std::stoll(s.substr(1));
}

int64_t step_index(const std::string& s) {
  if (s.size() < 5 || s.size() > 14 || s.compare(0, 4, "step") != 0) return -1;
  for (std::size_t i = 4; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return -1;
  if (s.size() > 5 && s[4] == '0') return -1;
  return std::stoll(s.substr(4));
}

Matrix widen(const io::TensorView& t, int64_t rows, int64_t cols) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.data.resize(static_cast<std::size_t>(rows * cols));
  const std::size_t n = m.data.size();
  if (t.dtype == DType::F32) {
    std::memcpy(m.data.data(), t.data, n * 4);
  } else {
    // Byte copies: a safetensors buffer gives no alignment promise.
    const unsigned char* p = static_cast<const unsigned char*>(t.data);
    for (std::size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      m.data[i] = t.dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return m;
}

std::vector<int32_t> read_ids(const io::TensorView& t, const std::string& where) {
  const bool flat = t.shape.size() == 1 || (t.shape.size() == 2 && t.shape[0] == 1);
  if (!flat || (t.dtype != DType::I64 && t.dtype != DType::I32))
    throw Error(where + ": must be a 1-D I64 (or I32) tensor of token ids, found " + dtype_name(t.dtype) + " " +
                shape_str(t.shape));
  std::vector<int32_t> ids(static_cast<std::size_t>(t.numel()));
  const unsigned char* p = static_cast<const unsigned char*>(t.data);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    int64_t v;
    if (t.dtype == DType::I64) {
      std::memcpy(&v, p + 8 * i, 8);
    } else {
      int32_t w;
      std::memcpy(&w, p + 4 * i, 4);
      v = w;
    }
    if (v < 0 || v > std::numeric_limits<int32_t>::max())
      throw Error(where + ": token id " + std::to_string(v) + " at index " + std::to_string(i) + " is not a valid id");
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

// Everything a file of either origin must satisfy; `where` prefixes each message.
void check(const Captures& c, const std::string& where) {
  if (c.prompts.empty()) throw Error(where + ": holds no prompts");
  const bool step = c.layout == CaptureLayout::Step;
  std::set<std::string> modules;
  std::map<std::string, int64_t> cols;
  for (std::size_t i = 0; i < c.prompts.size(); ++i) {
    const PromptCapture& p = c.prompts[i];
    const std::string pk = where + ": p" + std::to_string(i);
    if (p.prompt_token_ids.empty()) throw Error(pk + "/prompt_token_ids is missing or empty");
    if (step ? !p.flat.empty() : !p.steps.empty())
      throw Error(pk + " holds " + (step ? "flat" : "step") + " tensors in a " + layout_name(c.layout) + "-layout file");
    std::set<std::string> mine;
    for (const auto& [m, _] : p.steps) mine.insert(m);
    for (const auto& [m, _] : p.flat) mine.insert(m);
    if (mine.empty()) throw Error(pk + " holds no module tensors");
    if (i == 0) modules = mine;
    for (const std::string& m : modules)
      if (!mine.count(m)) throw Error(pk + "/" + m + " is missing (prompt 0 has it; every prompt needs the same modules)");
    for (const std::string& m : mine)
      if (!modules.count(m)) throw Error(pk + "/" + m + " is not in prompt 0 (every prompt needs the same modules)");

    const int64_t P = static_cast<int64_t>(p.prompt_token_ids.size());
    const int64_t K = static_cast<int64_t>(p.continuation_token_ids.size());
    auto check_matrix = [&](const std::string& key, const std::string& m, const Matrix& x) {
      if (x.cols < 1 || x.rows < 1 || x.data.size() != static_cast<std::size_t>(x.rows * x.cols))
        throw Error(key + ": empty or inconsistent tensor [" + std::to_string(x.rows) + ", " + std::to_string(x.cols) + "]");
      auto [it, fresh] = cols.emplace(m, x.cols);
      if (!fresh && it->second != x.cols)
        throw Error(key + ": feature size " + std::to_string(x.cols) + " differs from " + std::to_string(it->second) +
                    " elsewhere in the file for " + m);
    };
    for (const auto& [m, x] : p.flat) {
      const std::string key = pk + "/" + m;
      check_matrix(key, m, x);
      if (x.rows < P)
        throw Error(key + ": " + std::to_string(x.rows) + " positions, fewer than the prompt's " + std::to_string(P));
      if (K > 0 && x.rows > P + K)
        throw Error(key + ": " + std::to_string(x.rows) + " positions, more than prompt + continuation (" +
                    std::to_string(P) + " + " + std::to_string(K) + ")");
    }
    for (const auto& [m, steps] : p.steps) {
      if (steps.empty()) throw Error(pk + "/" + m + " has no steps");
      if (K > 0 && static_cast<int64_t>(steps.size()) - 1 > K)
        throw Error(pk + "/" + m + ": " + std::to_string(steps.size() - 1) + " decode steps, more than the " +
                    std::to_string(K) + " continuation tokens");
      for (std::size_t k = 0; k < steps.size(); ++k) {
        const std::string key = pk + "/" + m + "/step" + std::to_string(k);
        check_matrix(key, m, steps[k]);
        const int64_t full = P + static_cast<int64_t>(k);
        if (k == 0 && steps[k].rows != P)
          throw Error(key + ": step 0 has " + std::to_string(steps[k].rows) + " rows, the prompt has " + std::to_string(P));
        if (k > 0 && steps[k].rows != 1 && steps[k].rows != full)
          throw Error(key + ": " + std::to_string(steps[k].rows) + " rows; a later step holds 1 row or the whole sequence so far (" +
                      std::to_string(full) + ")");
      }
    }
  }
}

}  // namespace

std::vector<std::string> captured_modules(const Captures& c) {
  std::vector<std::string> out;
  if (c.prompts.empty()) return out;
  for (const auto& [m, _] : c.prompts[0].flat) out.push_back(m);
  for (const auto& [m, _] : c.prompts[0].steps) out.push_back(m);
  sort_forward(out);
  return out;
}

Captures read_captures(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  const auto& meta = f->metadata();
  auto need = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    if (it == meta.end())
      throw Error(path + ": not a captures file (header metadata lacks '" + key + "'; expected layout, modules, num_prompts)");
    return it->second;
  };
  Captures c;
  const std::string& layout = need("layout");
  if (layout == "step") c.layout = CaptureLayout::Step;
  else if (layout == "flat") c.layout = CaptureLayout::Flat;
  else throw Error(path + ": metadata layout is '" + layout + "', expected 'step' or 'flat'");
  const std::string& np = need("num_prompts");
  const int64_t n = prompt_index("p" + np);
  if (n < 1 || n > 1000000) throw Error(path + ": metadata num_prompts is '" + np + "', expected a positive integer");
  std::set<std::string> listed;
  for (const std::string& m : split_commas(need("modules"))) {
    if (m.empty()) throw Error(path + ": metadata modules has an empty name ('" + meta.at("modules") + "')");
    listed.insert(m);
  }
  for (const auto& [k, v] : meta)
    if (k != "layout" && k != "modules" && k != "num_prompts") c.metadata[k] = v;
  c.prompts.resize(static_cast<std::size_t>(n));

  const bool step = c.layout == CaptureLayout::Step;
  for (const io::TensorView& t : f->tensors()) {
    const std::string key = path + ": " + t.name;
    std::vector<std::string> parts;
    for (std::size_t from = 0;;) {
      std::size_t s = t.name.find('/', from);
      parts.push_back(t.name.substr(from, s == std::string::npos ? std::string::npos : s - from));
      if (s == std::string::npos) break;
      from = s + 1;
    }
    const int64_t pi = prompt_index(parts[0]);
    if (pi < 0 || parts.size() < 2 || parts.size() > 3)
      throw Error(key + ": unexpected tensor name (expected p{i}/{module}" + std::string(step ? "/step{k}" : "") +
                  " or p{i}/prompt_token_ids)");
    if (pi >= n) throw Error(key + ": prompt index " + std::to_string(pi) + " but num_prompts is " + std::to_string(n));
    PromptCapture& p = c.prompts[static_cast<std::size_t>(pi)];
    if (parts.size() == 2 && parts[1] == "prompt_token_ids") {
      p.prompt_token_ids = read_ids(t, key);
      continue;
    }
    if (parts.size() == 2 && parts[1] == "continuation_token_ids") {
      p.continuation_token_ids = read_ids(t, key);
      continue;
    }
    const std::string& module = parts[1];
    if (!listed.count(module)) throw Error(key + ": module '" + module + "' is not listed in the metadata's modules");
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
      throw Error(key + ": dtype " + std::string(dtype_name(t.dtype)) + ", expected F32, F16 or BF16");
    if (step) {
      if (parts.size() != 3) throw Error(key + ": a step-layout file names tensors p{i}/{module}/step{k}");
      const int64_t k = step_index(parts[2]);
      if (k < 0 || k > 10000000) throw Error(key + ": '" + parts[2] + "' is not step{k}");
      if (t.shape.size() != 3 || t.shape[0] != 1)
        throw Error(key + ": a step tensor must be [1, rows, E], found " + shape_str(t.shape));
      auto& steps = p.steps[module];
      if (steps.size() <= static_cast<std::size_t>(k)) steps.resize(static_cast<std::size_t>(k) + 1);
      steps[static_cast<std::size_t>(k)] = widen(t, t.shape[1], t.shape[2]);
    } else {
      if (parts.size() != 2) throw Error(key + ": a flat-layout file names tensors p{i}/{module}");
      if (t.shape.size() != 2) throw Error(key + ": a flat tensor must be [positions, E], found " + shape_str(t.shape));
      p.flat[module] = widen(t, t.shape[0], t.shape[1]);
    }
  }
  for (std::size_t i = 0; i < c.prompts.size(); ++i) {
    const PromptCapture& p = c.prompts[i];
    if (p.prompt_token_ids.empty()) throw Error(path + ": p" + std::to_string(i) + "/prompt_token_ids is missing");
    for (const std::string& m : listed)
      if (!p.flat.count(m) && !p.steps.count(m))
        throw Error(path + ": p" + std::to_string(i) + "/" + m + " is missing (listed in the metadata's modules)");
    for (const auto& [m, steps] : p.steps)
      for (std::size_t k = 0; k < steps.size(); ++k)
        if (steps[k].rows == 0 && steps[k].cols == 0)
          throw Error(path + ": p" + std::to_string(i) + "/" + m + "/step" + std::to_string(k) +
                      " is missing (steps must be numbered 0, 1, 2, … without gaps)");
  }
  check(c, path);
  return c;
}

void write_captures(const std::string& path, const Captures& c) {
  check(c, path);
  const std::vector<std::string> modules = captured_modules(c);
  std::vector<io::TensorToWrite> out;
  std::vector<std::vector<int64_t>> ids;  // storage for the widened token ids
  ids.reserve(2 * c.prompts.size());
  for (std::size_t i = 0; i < c.prompts.size(); ++i) {
    const PromptCapture& p = c.prompts[i];
    const std::string pk = "p" + std::to_string(i) + "/";
    auto add_ids = [&](const std::string& name, const std::vector<int32_t>& v) {
      ids.emplace_back(v.begin(), v.end());
      out.push_back({pk + name, DType::I64, {static_cast<int64_t>(v.size())}, ids.back().data()});
    };
    add_ids("prompt_token_ids", p.prompt_token_ids);
    if (!p.continuation_token_ids.empty()) add_ids("continuation_token_ids", p.continuation_token_ids);
    for (const std::string& m : modules) {
      if (c.layout == CaptureLayout::Flat) {
        const Matrix& x = p.flat.at(m);
        out.push_back({pk + m, DType::F32, {x.rows, x.cols}, x.data.data()});
      } else {
        const auto& steps = p.steps.at(m);
        for (std::size_t k = 0; k < steps.size(); ++k)
          out.push_back({pk + m + "/step" + std::to_string(k), DType::F32, {1, steps[k].rows, steps[k].cols},
                         steps[k].data.data()});
      }
    }
  }
  std::map<std::string, std::string> meta = c.metadata;
  std::string list;
  for (const std::string& m : modules) list += (list.empty() ? "" : ",") + m;
  meta["layout"] = layout_name(c.layout);
  meta["modules"] = list;
  meta["num_prompts"] = std::to_string(c.prompts.size());
  io::write_safetensors(path, out, meta);
}

std::map<std::string, Matrix> flatten(const PromptCapture& p) {
  if (p.steps.empty()) return p.flat;
  if (!p.flat.empty()) throw Error("flatten: a prompt holds both step and flat tensors");
  std::map<std::string, Matrix> out;
  for (const auto& [m, steps] : p.steps) {
    if (steps.empty()) throw Error("flatten: module " + m + " has no steps");
    Matrix f;
    f.cols = steps[0].cols;
    f.rows = steps[0].rows + static_cast<int64_t>(steps.size()) - 1;
    f.data = steps[0].data;
    f.data.reserve(static_cast<std::size_t>(f.rows * f.cols));
    for (std::size_t k = 1; k < steps.size(); ++k) {
      const Matrix& s = steps[k];
      if (s.cols != f.cols) throw Error("flatten: module " + m + " changes feature size at step " + std::to_string(k));
      if (s.rows < 1) throw Error("flatten: module " + m + " has an empty step " + std::to_string(k));
      const float* last = s.row(s.rows - 1);
      f.data.insert(f.data.end(), last, last + s.cols);
    }
    out[m] = std::move(f);
  }
  return out;
}

}  // namespace parity::accuracy
