#include "frontends/python/convert.h"

#include <cstring>
#include <limits>

#include "common/error.h"

namespace parity::python {

namespace {
bool is_integer(const py::handle& h) {
  // bool is an int in Python; a token id written True is almost certainly a mistake.
  return !py::isinstance<py::bool_>(h) && PyIndex_Check(h.ptr());
}
}  // namespace

std::vector<int32_t> tokens_from(const py::handle& obj, const std::string& what, const Encoder& encode) {
  if (py::isinstance<py::str>(obj)) {
    if (!encode) throw Error(what + ": expected token ids (a list of integers), got text");
    return encode(obj.cast<std::string>(), what);
  }
  if (py::isinstance<py::bytes>(obj)) throw Error(what + ": expected token ids or a str, got bytes");
  if (!py::isinstance<py::sequence>(obj) && !py::isinstance<py::array>(obj))
    throw Error(what + ": expected a list of token ids, got " + std::string(py::str(py::type::of(obj).attr("__name__"))));
  std::vector<int32_t> out;
  std::size_t i = 0;
  for (const py::handle& v : obj) {
    if (!is_integer(v))
      throw Error(what + ": element " + std::to_string(i) + " is " + std::string(py::repr(v)) + ", not an integer");
    const py::int_ n = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
    if (overflow != 0 || x < 0 || x > std::numeric_limits<int32_t>::max())
      throw Error(what + ": element " + std::to_string(i) + " = " + std::string(py::str(static_cast<const py::handle&>(n))) + " is not a token id");
    out.push_back(static_cast<int32_t>(x));
    ++i;
  }
  return out;
}

bool is_single_prompt(const py::handle& obj) {
  if (py::isinstance<py::str>(obj)) return true;
  if (py::isinstance<py::array>(obj)) return py::array(py::reinterpret_borrow<py::object>(obj)).ndim() <= 1;
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj)) return false;
  const py::sequence s = py::reinterpret_borrow<py::sequence>(obj);
  return s.size() == 0 || is_integer(s[0]);
}

std::vector<std::vector<int32_t>> token_lists_from(const py::handle& obj, const std::string& what,
                                                   const Encoder& encode) {
  std::vector<std::vector<int32_t>> out;
  if (is_single_prompt(obj)) {
    out.push_back(tokens_from(obj, what, encode));
  } else if (py::isinstance<py::sequence>(obj) || py::isinstance<py::array>(obj)) {
    std::size_t i = 0;
    for (const py::handle& p : obj) out.push_back(tokens_from(p, what + "[" + std::to_string(i++) + "]", encode));
  } else {
    throw Error(what + ": expected a list of token ids or a list of such lists");
  }
  if (out.empty()) throw Error(what + ": empty list");
  return out;
}

py::array_t<float> to_numpy(const float* data, int64_t rows, int64_t cols) {
  py::array_t<float> a({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)});
  if (rows * cols > 0) std::memcpy(a.mutable_data(), data, sizeof(float) * static_cast<std::size_t>(rows * cols));
  return a;
}

py::array_t<float> to_numpy(const accuracy::Matrix& m) { return to_numpy(m.data.data(), m.rows, m.cols); }

py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

std::string json_text(const py::handle& obj) {
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  return py::module_::import("json").attr("dumps")(obj).cast<std::string>();
}

}  // namespace parity::python
