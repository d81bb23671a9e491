#pragma once
// Choosing probe points by name (`parity capture --modules`). A pattern is one of
//   exact name   backbone.layers.3.mixer
//   layer range  backbone.layers.0-3.mixer   a dotted part "A-B" (digits, A <= B) stands for A, A+1, …, B;
//                                            every name it stands for must exist
//   regex        re:backbone\.layers\.\d+\.mixer\.dt   std::regex (ECMAScript) that must match the whole name
// A pattern that selects nothing is an error naming it and listing a few valid names.
#include <string>
#include <vector>

namespace parity::accuracy {

// The selected names, each once, in the order of `available` (the model's forward order).
std::vector<std::string> expand_module_patterns(const std::vector<std::string>& patterns,
                                                const std::vector<std::string>& available);

}  // namespace parity::accuracy
