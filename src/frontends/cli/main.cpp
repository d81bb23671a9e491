// `parity` — one binary, one subcommand per job. Every user error ends as one line on stderr
// and a non-zero exit status; nothing is written unless the command succeeds.
#include <cstdio>
#include <exception>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "frontends/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"parity — exact-mode inference engine for Mamba2 and hybrid models"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, parity::cli::Runner>> cmds;
  auto reg = [&](auto add) {
    std::size_t before = app.get_subcommands({}).size();
    parity::cli::Runner r = add(app);
    cmds.emplace_back(app.get_subcommands({})[before], r);
  };
  reg(parity::cli::add_score);
  reg(parity::cli::add_generate);
  reg(parity::cli::add_verify);
  reg(parity::cli::add_validate);
  reg(parity::cli::add_export);
  reg(parity::cli::add_probes);
  reg(parity::cli::add_capture);
  reg(parity::cli::add_compare);
  reg(parity::cli::add_serve);
  reg(parity::cli::add_tokenize);
  reg(parity::cli::add_detokenize);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : cmds)
      if (sub->parsed()) return run();
  } catch (const parity::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}
