// parity probes MODEL: every probe point (the names capture, compare and tensor replacement use),
// in forward order, with its shape and meaning.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "frontends/cli/commands.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace parity::cli {

Runner add_probes(CLI::App& app) {
  struct Opts {
    std::string model;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("probes", "List the probe points of a model (names for capture and replacement)");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME")->required();
  sub->add_flag("--json", o->json, "print a JSON array instead of a table");
  return [o]() {
    auto model = model::load_model(model::open_checkpoint(o->model));
    const auto points = model->probe_points();
    if (o->json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& p : points) j.push_back({{"name", p.name}, {"cols", p.cols}, {"meaning", p.meaning}});
      std::printf("%s\n", j.dump(1).c_str());
      return 0;
    }
    std::size_t w = 4;
    for (const auto& p : points) w = std::max(w, p.name.size());
    std::printf("%-*s  %-16s  %s\n", static_cast<int>(w), "name", "shape", "meaning");
    for (const auto& p : points) {
      const std::string shape = "[tokens, " + std::to_string(p.cols) + "]";
      std::printf("%-*s  %-16s  %s\n", static_cast<int>(w), p.name.c_str(), shape.c_str(), p.meaning.c_str());
    }
    return 0;
  };
}

}  // namespace parity::cli
