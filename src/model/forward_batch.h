#pragma once
// One packed pass: the tokens of several sequences back to back, and per sequence where it
// sits in its own stream. Built by the engine's runner (or by `score` for one sequence).
#include <cstdint>
#include <vector>

namespace parity::model {

// Numerics of the recurrent layers (DESIGN.md rules 7, 8).
//  Plain: SSD over the new tokens from the carried state (chunk grid restarts at the call's
//         first token), SSU for one-token decode — vLLM's behaviour, the baseline.
//  Exact: chunk grid anchored at absolute positions; fp32 boundary state + replay rows.
enum class ScanMode { Plain, Exact };

struct SeqChunk {
  int slot = 0;       // state-cache slot of the sequence
  int64_t start = 0;  // absolute position of the first token of this chunk
  int n = 0;          // tokens of this sequence in the pass
};

struct ForwardBatch {
  std::vector<int32_t> tokens;   // Σ n tokens, sequence after sequence
  std::vector<SeqChunk> seqs;
  std::vector<int> logit_rows;   // packed row indices whose logits are wanted, in output order
  std::vector<uint64_t> request_ids;  // optional, one per seq: lets probe hooks map rows to requests
  // optional, one per seq: the first position holding a speculative draft token (-1: none), so
  // probe hooks can tell rows that may be rejected (ProbeRows::is_draft)
  std::vector<int64_t> draft_from;
};

}  // namespace parity::model
