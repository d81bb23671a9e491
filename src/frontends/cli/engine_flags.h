#pragma once
// The flags of every command that runs the model, registered in one place so their names, checks
// and help read the same everywhere: --device/--dtype, the numerics flags, the serving flags,
// --max-num-batched-tokens, --max-num-seqs, --max-model-len, --state-memory-mb, --preempt-at-step,
// --threads, --additional-config and --moe-routing. The values, and how they become a model and an
// engine, are frontends::EngineOptions, which the Python module shares.
#include <CLI/CLI.hpp>

#include "frontends/common/engine_options.h"

namespace parity::cli {

using EngineFlags = frontends::EngineOptions;

// Which flags a command offers (--device, --dtype and --moe-routing always); an option left out
// keeps EngineFlags' default. A command whose default differs sets it in EngineFlags before
// add_engine_flags; one whose help differs sets it on the option afterwards.
struct EngineFlagSet {
  bool numerics = true;
  bool serving = true;
  bool max_num_batched_tokens = true;
  bool max_num_seqs = true;
  bool max_model_len = true;
  bool state_memory = true;
  bool preempt = true;
  bool threads = true;
  bool additional_config = true;
};

void add_engine_flags(CLI::App* sub, EngineFlags& f, const EngineFlagSet& which = {});

}  // namespace parity::cli
