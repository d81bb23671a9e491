#pragma once
// Python values in and out of the C++ frontend: token lists from any sequence of integers (lists,
// tuples, numpy integer arrays) or from text (through an encoder), fp32 matrices to numpy arrays,
// JSON to Python objects.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accuracy/captures_file.h"

namespace parity::python {

namespace py = pybind11;

// Text → token ids; `what` names the argument in errors. Null: text is refused.
using Encoder = std::function<std::vector<int32_t>(const std::string& text, const std::string& what)>;

// One token list: a str (encoded), or integers in [0, 2^31); anything else is a parity::Error naming
// `what` and the element.
std::vector<int32_t> tokens_from(const py::handle& obj, const std::string& what, const Encoder& encode = nullptr);
// True for one prompt (a str, or a sequence of integers), false for a sequence of prompts.
bool is_single_prompt(const py::handle& obj);
// One prompt or several, as is_single_prompt decides; an empty list of prompts is an error.
std::vector<std::vector<int32_t>> token_lists_from(const py::handle& obj, const std::string& what,
                                                   const Encoder& encode = nullptr);

py::array_t<float> to_numpy(const float* data, int64_t rows, int64_t cols);
py::array_t<float> to_numpy(const accuracy::Matrix& m);

py::object to_python(const nlohmann::json& j);
std::string json_text(const py::handle& obj);  // a str is taken as JSON text, anything else is json.dumps'd

}  // namespace parity::python
