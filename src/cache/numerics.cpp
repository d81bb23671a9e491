#include "cache/numerics.h"

#include "common/error.h"

namespace parity::cache {

namespace {
const char* const kIdentityKeys[] = {"numerics", "ssm_state_dtype", "exact_grid", "exact_stagger",
                                     "exact_scan_products", "device", "tensor_parallel"};

// The value a file without the key means: files from before the key existed were one-rank CPU runs.
std::string missing_value(const std::string& key) {
  if (key == "device") return "cpu";
  if (key == "tensor_parallel") return "1";
  if (key == "exact_scan_products") return "float32";
  return "(none)";
}
}

std::map<std::string, std::string> Numerics::metadata() const {
  std::map<std::string, std::string> m{{"numerics", exact ? "exact" : "plain"}, {"ssm_state_dtype", ssm_dtype == DType::F32 ? "float32" : "bfloat16"}};
  if (exact) {
    m["exact_grid"] = std::to_string(grid.cell);
    m["exact_stagger"] = grid.stagger ? "spread" : "none";
    if (grid.products != kernels::ScanProducts::float32) m["exact_scan_products"] = scan_products_name(grid.products);
  }
  if (device != "cpu") m["device"] = device;
  if (tensor_parallel != 1) m["tensor_parallel"] = std::to_string(tensor_parallel);
  return m;
}

std::string Numerics::describe() const {
  const char* state = ssm_dtype == DType::F32 ? "float32" : "bfloat16";
  std::string where;
  if (device != "cpu") where += " on " + device;
  if (tensor_parallel != 1) where += ", tensor parallel " + std::to_string(tensor_parallel);
  if (!exact) return std::string("plain (vLLM: chunked SSD prefill, SSU decode, state ") + state + ")" + where;
  const std::string products = grid.products == kernels::ScanProducts::float32
                                   ? ""
                                   : std::string(", scan products ") + scan_products_name(grid.products);
  return "exact (grid " + std::to_string(grid.cell) + ", stagger " + (grid.stagger ? "spread" : "none") + ", state " +
         state + products + ")" + where;
}

Numerics resolve_numerics(bool exact, std::optional<DType> ssm_dtype, std::optional<int> exact_cell,
                          StaggerChoice stagger, int chunk_size, int default_cell, kernels::ScanProducts products) {
  validate_scan_products(exact, products);
  Numerics n;
  n.exact = exact;
  n.ssm_dtype = ssm_dtype.value_or(exact ? DType::F32 : DType::BF16);
  if (n.ssm_dtype != DType::F32 && n.ssm_dtype != DType::BF16)
    throw Error("--mamba-ssm-cache-dtype must be float32 or bfloat16");
  const int cell = exact_cell.value_or(default_cell);
  validate_exact_cell(cell);
  n.grid.cell = cell;
  n.grid.stagger = stagger == StaggerChoice::Spread || (stagger == StaggerChoice::Auto && cell != chunk_size);
  n.grid.products = products;
  return n;
}

void validate_exact_cell(int cell) {
  if (cell < 1 || cell > 4096 || (cell & (cell - 1)) != 0)
    throw Error("--exact-grid must be a power of two between 1 and 4096 (got " + std::to_string(cell) + ")");
}

void validate_scan_products(bool exact, kernels::ScanProducts products) {
  if (!exact && products != kernels::ScanProducts::float32)
    throw Error("--scan-products chooses exact mode's scan products: add --exact (plain mode's scan is vLLM's)");
}

kernels::ScanProducts parse_scan_products(const std::string& s) {
  if (s == "float32") return kernels::ScanProducts::float32;
  if (s == "bfloat16") return kernels::ScanProducts::bfloat16;
  if (s == "split") return kernels::ScanProducts::split;
  throw Error("--scan-products must be float32, bfloat16 or split (got '" + s + "')");
}

const char* scan_products_name(kernels::ScanProducts p) {
  switch (p) {
    case kernels::ScanProducts::bfloat16: return "bfloat16";
    case kernels::ScanProducts::split: return "split";
    default: return "float32";
  }
}

StaggerChoice parse_stagger(const std::string& s) {
  if (s == "auto") return StaggerChoice::Auto;
  if (s == "none") return StaggerChoice::None;
  if (s == "spread") return StaggerChoice::Spread;
  throw Error("--exact-stagger must be auto, none or spread (got '" + s + "')");
}

std::string numerics_difference(const std::map<std::string, std::string>& a,
                                const std::map<std::string, std::string>& b) {
  if (!a.count("numerics") || !b.count("numerics")) return "";
  std::string out;
  for (const char* k : kIdentityKeys) {
    auto ia = a.find(k), ib = b.find(k);
    const std::string va = ia == a.end() ? missing_value(k) : ia->second;
    const std::string vb = ib == b.end() ? missing_value(k) : ib->second;
    if (va == vb) continue;
    out += (out.empty() ? "" : ", ") + std::string(k) + " " + va + " vs " + vb;
  }
  return out;
}

}  // namespace parity::cache
