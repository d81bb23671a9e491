#include "cache/planner.h"

#include <algorithm>
#include <cstdio>

#include "cache/kv_cache.h"
#include "common/error.h"

namespace parity::cache {

static std::string mib(std::size_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

static std::string kib(std::size_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(b) / 1024.0);
  return buf;
}

ModelCacheOptions CachePlan::options(const MambaCacheOptions& mamba) const {
  ModelCacheOptions o;
  o.mamba = mamba;
  o.mamba.num_slots = num_slots;
  o.kv_block_size = kv_block_size;
  o.kv_num_blocks = kv_num_blocks;
  return o;
}

std::string CachePlan::describe() const {
  std::string s = "state cache: " + std::to_string(num_slots) + " slots × " + mib(per_seq.total()) + " = " +
                  mib(per_seq.total() * static_cast<std::size_t>(num_slots)) + "\n";
  s += "  per sequence: conv " + mib(per_seq.conv) + ", ssm " + mib(per_seq.ssm) + ", replay ring " +
       mib(per_seq.replay) + ", total " + mib(per_seq.total()) + "\n";
  if (kv_num_blocks > 0)
    s += "KV cache: " + std::to_string(kv_num_blocks) + " blocks × " + std::to_string(kv_block_size) + " tokens = " +
         std::to_string(kv_tokens()) + " tokens, " + kib(kv_per_token) + " per token, " + mib(kv_bytes()) + "\n";
  if (prefix_cache_bytes > 0)
    s += "prefix cache: " + mib(prefix_cache_bytes) + " for state images (" +
         std::to_string(per_seq.total() ? prefix_cache_bytes / per_seq.total() : 0) + " sequences' states)\n";
  return s;
}

CachePlan plan_cache(const ModelCacheSpec& spec, const MambaCacheOptions& opt, std::size_t budget_bytes,
                     int max_num_seqs, int64_t max_model_len, int kv_block_size, PrefixCacheBudget prefix) {
  validate(opt);
  if (max_num_seqs < 1) throw Error("max_num_seqs must be at least 1");
  CachePlan p;
  if (spec.num_mamba_layers > 0) p.per_seq = slot_bytes(spec.mamba, spec.num_mamba_layers, opt);
  p.kv_block_size = kv_block_size;
  const bool attn = spec.num_attention_layers > 0;
  if (attn) p.kv_per_token = kv_bytes_per_token(spec.num_attention_layers, spec.num_kv_heads, spec.head_dim);
  const std::size_t block = p.kv_per_token * static_cast<std::size_t>(kv_block_size);
  if (prefix.enabled) {
    p.prefix_cache_bytes = prefix.bytes ? prefix.bytes
                           : budget_bytes ? budget_bytes / 4
                                          : p.per_seq.total() * static_cast<std::size_t>(std::max(8, max_num_seqs));
    if (budget_bytes && p.prefix_cache_bytes >= budget_bytes)
      throw Error("the prefix cache's " + mib(p.prefix_cache_bytes) + " leave nothing of the " + mib(budget_bytes) +
                  " budget for the sequences");
    if (budget_bytes) budget_bytes -= p.prefix_cache_bytes;
  }
  if (budget_bytes == 0) {
    p.num_slots = max_num_seqs;
    if (attn) {
      const int64_t per = std::max<int64_t>(1, std::min(max_model_len, kDefaultKvTokensPerSeq));
      p.kv_num_blocks = max_num_seqs * static_cast<int>((per + kv_block_size - 1) / kv_block_size);
    }
    return p;
  }
  const std::size_t one = p.per_seq.total() + block;
  const std::size_t fit = budget_bytes / std::max<std::size_t>(1, one);
  if (fit == 0)
    throw Error("cache budget of " + mib(budget_bytes) + " holds no sequence: one needs " + mib(one) +
                (attn ? " (state " + mib(p.per_seq.total()) + " + one KV block of " + mib(block) + ")" : std::string()));
  p.num_slots = static_cast<int>(std::min<std::size_t>(fit, static_cast<std::size_t>(max_num_seqs)));
  if (attn) {
    const std::size_t rest = budget_bytes - p.per_seq.total() * static_cast<std::size_t>(p.num_slots);
    p.kv_num_blocks = static_cast<int>(std::min<std::size_t>(rest / block, std::size_t(1) << 30));
  }
  return p;
}

CachePlan plan_cache(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt,
                     std::size_t budget_bytes, int max_num_seqs) {
  ModelCacheSpec spec;
  spec.num_mamba_layers = num_mamba_layers;
  spec.mamba = cfg;
  spec.chunk_size = cfg.chunk_size;
  return plan_cache(spec, opt, budget_bytes, max_num_seqs);
}

}  // namespace parity::cache
