#pragma once
// Python values in and out of the C++ frontend: token lists from any sequence of integers (lists,
// tuples, numpy integer arrays), fp32 matrices to numpy arrays, JSON to Python objects.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accuracy/captures_file.h"

namespace parity::python {

namespace py = pybind11;

// Throws parity::Error naming `what` and the element for anything but integers in [0, 2^31).
std::vector<int32_t> tokens_from(const py::handle& obj, const std::string& what);
// True for a sequence of integers (one prompt), false for a sequence of sequences (several).
bool is_token_list(const py::handle& obj);
// One prompt or several, as is_token_list decides; an empty list is an error naming `what`.
std::vector<std::vector<int32_t>> token_lists_from(const py::handle& obj, const std::string& what);

py::array_t<float> to_numpy(const float* data, int64_t rows, int64_t cols);
py::array_t<float> to_numpy(const accuracy::Matrix& m);

py::object to_python(const nlohmann::json& j);
std::string json_text(const py::handle& obj);  // a str is taken as JSON text, anything else is json.dumps'd

}  // namespace parity::python
