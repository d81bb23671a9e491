#pragma once
// --moe-routing direct|fused: which of seed 000's two router integration patterns the model runs
// (model/model_options.h). On the commands that take --additional-config, so a router replacement
// can be exercised through either pattern; models without experts ignore it.
#include <string>

#include <CLI/CLI.hpp>

namespace parity::cli {

void add_moe_routing_flag(CLI::App* sub, std::string& value);  // value defaults to "direct"

}  // namespace parity::cli
