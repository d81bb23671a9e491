#include "accuracy/module_order.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <tuple>

namespace parity::accuracy {
namespace {

// Within a layer, in the order the Mamba2 and GraniteMoeHybrid forwards probe them; the block
// output comes last. A layer point that is not listed goes after the listed ones.
// NemotronH's blocks all sit under "mixer" (its attention projections, router and shared expert too);
// FalconH1 runs "mamba" before "self_attn" in one layer; Bamba and FalconH1 end a layer with "feed_forward".
constexpr const char* kLayerOrder[] = {"mixer.in_proj",      "mixer.conv1d",      "mixer.dt",
                                       "mixer.norm",         "mixer.q_proj",      "mixer.k_proj",
                                       "mixer.v_proj",       "mixer.gate",        "mixer.shared_experts",
                                       "mixer",              "mamba.in_proj",     "mamba.conv1d",
                                       "mamba.dt",           "mamba.norm",        "mamba",
                                       "self_attn.q_proj",   "self_attn.k_proj",  "self_attn.v_proj",
                                       "self_attn",          "block_sparse_moe.router",
                                       "block_sparse_moe",   "shared_mlp",        "feed_forward"};

struct Key {
  int layer;    // -1 before the layers, INT_MAX after them
  int within;   // rank inside the layer / outside group
  std::string name;
  bool operator<(const Key& o) const { return std::tie(layer, within, name) < std::tie(o.layer, o.within, o.name); }
};

Key key_of(const std::string& m) {
  const int l = layer_index(m);
  if (l < 0) {
    if (m.find("embed") != std::string::npos) return {-1, 0, m};
    if (m == "lm_head") return {INT_MAX, 2, m};
    if (m.find("norm_f") != std::string::npos || m.find("final_layernorm") != std::string::npos)
      return {INT_MAX, 0, m};
    return {INT_MAX, 1, m};
  }
  // The part after "layers.N": "" for the block output itself.
  const std::size_t end = m.find('.', m.find(".layers.") + 8);
  std::string rest = end == std::string::npos ? "" : m.substr(end + 1);
  if (rest.empty()) return {l, 100, m};
  const int n = static_cast<int>(std::size(kLayerOrder));
  for (int i = 0; i < n; ++i)
    if (rest == kLayerOrder[i]) return {l, i, m};
  return {l, 50, m};
}

}  // namespace

int layer_index(const std::string& m) {
  const std::size_t at = m.find(".layers.");
  if (at == std::string::npos) return -1;
  const std::size_t digits = at + 8;
  std::size_t end = digits;
  while (end < m.size() && m[end] >= '0' && m[end] <= '9') ++end;
  if (end == digits || end - digits > 9 || (end < m.size() && m[end] != '.')) return -1;
  return std::stoi(m.substr(digits, end - digits));
}

bool forward_before(const std::string& a, const std::string& b) { return key_of(a) < key_of(b); }

void sort_forward(std::vector<std::string>& modules) { std::sort(modules.begin(), modules.end(), forward_before); }

}  // namespace parity::accuracy
