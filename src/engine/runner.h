#pragma once
// The runner (llama.cpp's llama-batch): packs the chunks the scheduler picked into one forward
// batch — tokens, per-sequence slot and start position, request ids — and decides which rows
// reach the head: the row after a request's last token (it chooses the next token) and the rows
// whose raw logits the request asked for and has not received yet. A request with speculative
// drafts (Request::drafts) feeds them after its stream, and every draft row reaches the head.
#include <cstdint>
#include <map>
#include <vector>

#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/forward_batch.h"

namespace parity::engine {

struct PackedPass {
  model::ForwardBatch batch;
  // One per entry of batch.logit_rows, in order: whose row it is and at which position.
  struct RowUse {
    Request* req;
    int64_t pos;
  };
  std::vector<RowUse> uses;
};

// next_logit_pos: per request, the first position whose raw logits have not been emitted.
PackedPass pack_pass(const std::vector<ScheduledChunk>& chunks, const std::map<uint64_t, int64_t>& next_logit_pos);

}  // namespace parity::engine
