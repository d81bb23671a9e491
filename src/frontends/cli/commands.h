#pragma once
// Each subcommand registers its options on the CLI11 app and returns the function that runs it.
#include <functional>

#include <CLI/CLI.hpp>

namespace parity::cli {

using Runner = std::function<int()>;

Runner add_score(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_verify(CLI::App& app);
Runner add_validate(CLI::App& app);
Runner add_probes(CLI::App& app);
Runner add_capture(CLI::App& app);
Runner add_compare(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_detokenize(CLI::App& app);

}  // namespace parity::cli
