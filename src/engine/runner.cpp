#include "engine/runner.h"

#include <algorithm>

namespace parity::engine {

PackedPass pack_pass(const std::vector<ScheduledChunk>& chunks, const std::map<uint64_t, int64_t>& next_logit_pos) {
  PackedPass p;
  int row = 0;
  for (const ScheduledChunk& c : chunks) {
    Request* r = c.req;
    p.batch.seqs.push_back({r->slot, r->num_computed, c.n});
    p.batch.request_ids.push_back(r->id);
    p.batch.draft_from.push_back(r->drafts.empty() ? -1 : static_cast<int64_t>(r->tokens.size()));
    const int64_t last = static_cast<int64_t>(r->tokens.size()) - 1;
    const auto it = next_logit_pos.find(r->id);
    const int64_t from = std::max<int64_t>(it == next_logit_pos.end() ? 0 : it->second, r->num_computed);
    const bool wants_raw = r->spec.return_logits || r->spec.return_prompt_logits;
    const int64_t stream = last + 1;
    for (int i = 0; i < c.n; ++i) {
      const int64_t pos = r->num_computed + i;
      // Past the stream: the speculative drafts, whose rows all reach the head (they are verified).
      p.batch.tokens.push_back(pos < stream ? r->tokens[static_cast<std::size_t>(pos)]
                                            : r->drafts.at(static_cast<std::size_t>(pos - stream)));
      const bool raw = wants_raw && pos >= from && (r->spec.return_prompt_logits || pos >= r->prompt_len() - 1);
      if (pos >= last || raw) {
        p.batch.logit_rows.push_back(row);
        p.uses.push_back({r, pos});
      }
      ++row;
    }
  }
  return p;
}

}  // namespace parity::engine
