#pragma once
// Token lists on the command line: a path to a JSON array of integers, or an inline
// comma-separated list ("1,2,3"). Empty lists, non-integers and negative ids are errors.
#include <cstdint>
#include <string>
#include <vector>

namespace parity::io {

std::vector<int32_t> read_tokens(const std::string& spec);
void write_tokens_json(const std::string& path, const std::vector<int32_t>& tokens);

}  // namespace parity::io
