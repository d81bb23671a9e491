#pragma once
// Captures files: named intermediate tensors per prompt, in safetensors (never pickle).
//   step layout (seed 000's): p{i}/{module}/step{k}: step 0 [1, prompt_len, E]; each later step
//                             [1, seq_so_far, E] (HF recomputes everything) or [1, 1, E]
//   flat layout:              p{i}/{module}: [positions, E], row = absolute position
// Both carry p{i}/prompt_token_ids (I64) and header metadata: {"layout": "step"|"flat",
// "modules": "name,name,…", "num_prompts": "N"}. Tensors may be F32, F16 or BF16; readers widen.
// Optional: p{i}/continuation_token_ids (I64), the tokens fed after the prompt (generated or
// forced), so that a reader knows which input each later position saw; any other metadata
// entries (model, mode, source, …) are kept as they are.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace parity::accuracy {

struct Matrix {  // row-major fp32 [rows, cols]
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
  const float* row(int64_t r) const { return data.data() + r * cols; }
};

struct PromptCapture {
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> continuation_token_ids;  // may be empty (unknown or none)
  std::map<std::string, std::vector<Matrix>> steps;  // step layout: module → step tensors
  std::map<std::string, Matrix> flat;                // flat layout: module → [positions, E]
};

enum class CaptureLayout { Step, Flat };

struct Captures {
  CaptureLayout layout = CaptureLayout::Flat;
  std::vector<PromptCapture> prompts;
  std::map<std::string, std::string> metadata;  // besides layout, modules and num_prompts
};

// Throws parity::Error naming the file and the key on anything malformed (missing
// prompt_token_ids, a step tensor that is not 3-D with a leading 1, mixed feature sizes, …).
Captures read_captures(const std::string& path);
void write_captures(const std::string& path, const Captures& c);

// The modules a file holds, in forward order (the same for every prompt once read).
std::vector<std::string> captured_modules(const Captures& c);

// Seed 000's flattening: all rows of step 0, then the last row of each later step.
// Flat-layout captures pass through unchanged.
std::map<std::string, Matrix> flatten(const PromptCapture& p);

}  // namespace parity::accuracy
