#pragma once
// A capture run: the prompts go through the engine (scheduler, chunked prefill, preemption, any
// schedule) with CaptureHooks attached, and come back as a captures file's content.
#include <cstdint>
#include <string>
#include <vector>

#include "accuracy/captures_file.h"
#include "accuracy/replacement_session.h"
#include "engine/engine.h"

namespace parity::accuracy {

struct CaptureSpec {
  std::vector<std::vector<int32_t>> prompts;
  // Empty: generate greedily for max_tokens. One entry: the same forced continuation for every
  // prompt. Otherwise one per prompt (an empty one generates greedily).
  std::vector<std::vector<int32_t>> forced;
  int max_tokens = 1;
  std::vector<std::string> modules;  // probe point names (expanded already)
  CaptureLayout layout = CaptureLayout::Flat;
  engine::EngineConfig engine;
  // Optional tensor replacement active during the capture (--additional-config): replaced
  // points are captured with their injected values, and everything downstream sees them.
  ReplacementSession* replacement = nullptr;
};

// Every position the engine fed is captured: prompt + forced tokens (all of them), or prompt +
// generated tokens but the last one (which is sampled and never fed).
Captures capture_through_engine(const model::Model& model, const CaptureSpec& spec);

}  // namespace parity::accuracy
