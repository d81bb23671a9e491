#pragma once
// What a model is built from: its config.json and a way to find each named tensor. Either a
// Hugging Face checkpoint folder (mmapped safetensors) or a built-in model generated in memory.
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace parity::model {

struct Checkpoint {
  std::string origin;  // folder path or "builtin:NAME"
  nlohmann::json config;
  std::function<const io::TensorView*(const std::string&)> find;
  std::shared_ptr<void> keepalive;  // owns the mmaps or the generated buffers
};

// MODEL argument of every command: a checkpoint folder or builtin:NAME.
Checkpoint open_checkpoint(const std::string& spec);

}  // namespace parity::model
