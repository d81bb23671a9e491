#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/file_util.h"
#include "io/json_file.h"

namespace parity::io {

namespace {

using ojson = nlohmann::ordered_json;

// The reference implementation refuses headers above 100 MB; a length beyond that is far more
// likely a corrupt or non-safetensors file than a real header.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_u64_le(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string range_str(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + ")";
}

struct Range {
  uint64_t begin, end;
  std::size_t index;
};

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto fail = [&](const std::string& msg) -> Error { return Error(path + ": " + msg); };

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw fail(std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw fail("not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw fail("file is " + std::to_string(file_size) +
               " bytes, too short for the 8-byte header length");
  }

  // Constructed before mmap so that the destructor unmaps on every validation failure below.
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw fail(std::string("cannot mmap: ") + std::strerror(map_err));
  f->map_ = m;
  f->map_size_ = file_size;
  const auto* bytes = static_cast<const unsigned char*>(m);

  const uint64_t n = read_u64_le(bytes);
  if (n > file_size - 8)
    throw fail("header length " + std::to_string(n) + " runs past the end of the file (" +
               std::to_string(file_size) + " bytes)");
  if (n < 2) throw fail("header length " + std::to_string(n) + " is too small for a JSON object");
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " exceeds the 100 MB limit");
  const uint64_t buffer_size = file_size - 8 - n;
  const unsigned char* buffer = bytes + 8 + n;

  // A JSON object keeps one value per key, so a duplicated tensor name would silently lose an
  // entry; the callback sees every key as it is parsed.
  std::set<std::string> seen;
  std::string duplicate;
  ojson::parser_callback_t cb = [&](int depth, ojson::parse_event_t ev, ojson& parsed) {
    if (depth == 1 && ev == ojson::parse_event_t::key && duplicate.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) duplicate = k;
    }
    return true;
  };
  ojson header;
  std::string header_text(reinterpret_cast<const char*>(bytes + 8), n);
  try {
    header = ojson::parse(header_text, cb);
  } catch (const ojson::parse_error& e) {
    throw fail("header is not valid JSON (at byte " + std::to_string(e.byte) + " of the header): " +
               json_error_reason(e));
  } catch (const ojson::out_of_range&) {
    throw fail("header is not valid JSON: a number is outside the range of a double");
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  if (!duplicate.empty()) throw fail("tensor '" + duplicate + "' appears twice in the header");

  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const ojson& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__ is not a JSON object");
      for (auto m_it = entry.begin(); m_it != entry.end(); ++m_it) {
        if (!m_it.value().is_string())
          throw fail("__metadata__ entry '" + m_it.key() + "' is not a string");
        f->metadata_[m_it.key()] = m_it.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (!entry.is_object()) throw fail(what + " is not a JSON object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string())
      throw fail(what + " has no string 'dtype'");
    if (!entry.contains("shape") || !entry["shape"].is_array())
      throw fail(what + " has no array 'shape'");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array())
      throw fail(what + " has no array 'data_offsets'");

    const std::string dtype_s = entry["dtype"].get<std::string>();
    auto dtype = dtype_from_name(dtype_s);
    if (!dtype)
      throw fail(what + " has unsupported dtype '" + dtype_s +
                 "' (supported: F32, F16, BF16, I32, I64)");

    TensorView t;
    t.name = name;
    t.dtype = *dtype;
    uint64_t expected = dtype_size(*dtype);
    bool overflow = false;
    for (const ojson& d : entry["shape"]) {
      if (!d.is_number_integer()) throw fail(what + " has a non-integer dimension " + d.dump());
      if (d.is_number_unsigned()) {
        uint64_t u = d.get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX))
          throw fail(what + " dimension " + std::to_string(u) + " is too large");
        t.shape.push_back(static_cast<int64_t>(u));
      } else {
        int64_t v = d.get<int64_t>();
        if (v < 0) throw fail(what + " has negative dimension " + std::to_string(v));
        t.shape.push_back(v);
      }
      if (__builtin_mul_overflow(expected, static_cast<uint64_t>(t.shape.back()), &expected))
        overflow = true;
    }

    const ojson& offs = entry["data_offsets"];
    if (offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      throw fail(what + " data_offsets must be two non-negative integers, got " + offs.dump());
    const uint64_t b = offs[0].get<uint64_t>(), e = offs[1].get<uint64_t>();
    if (e < b) throw fail(what + " byte range " + range_str(b, e) + " ends before it begins");
    if (overflow || e - b != expected)
      throw fail(what + " byte range " + range_str(b, e) + " does not match shape " +
                 shape_str(t.shape) + " × " + dtype_name(*dtype) + " = " +
                 (overflow ? std::string("more than 2^64") : std::to_string(expected)) +
                 " bytes");
    if (e > buffer_size)
      throw fail(what + " byte range " + range_str(b, e) + " is outside the " +
                 std::to_string(buffer_size) + "-byte data buffer");
    t.data = buffer + b;
    t.nbytes = static_cast<std::size_t>(e - b);
    ranges.push_back({b, e, f->tensors_.size()});
    f->tensors_.push_back(std::move(t));
  }

  // Sorting by (begin, end) puts empty tensors before a non-empty one at the same offset, so
  // they never count as overlapping it.
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) {
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  uint64_t cursor = 0;
  const Range* prev = nullptr;
  for (const Range& r : ranges) {
    const std::string& name = f->tensors_[r.index].name;
    if (r.begin < cursor)
      throw fail("tensor '" + name + "' byte range " + range_str(r.begin, r.end) +
                 " overlaps tensor '" + f->tensors_[prev->index].name + "' " +
                 range_str(prev->begin, prev->end));
    if (r.begin > cursor)
      throw fail("bytes " + range_str(cursor, r.begin) + " of the data buffer belong to no tensor");
    cursor = r.end;
    if (r.end > r.begin || !prev) prev = &r;
  }
  if (cursor != buffer_size)
    throw fail("bytes " + range_str(cursor, buffer_size) +
               " of the data buffer belong to no tensor (file is " + std::to_string(file_size) +
               " bytes, tensors end at " + std::to_string(8 + n + cursor) + ")");
  return f;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  for (const TensorView& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

WeightStore WeightStore::open_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  WeightStore ws;
  const fs::path folder(dir);
  const fs::path single = folder / "model.safetensors";
  const fs::path index = folder / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::is_regular_file(single, ec)) {
    auto f = SafetensorsFile::open(single.string());
    for (const TensorView& t : f->tensors()) ws.index_[t.name] = &t;
    ws.files_.push_back(std::move(f));
    return ws;
  }
  if (!fs::is_regular_file(index, ec))
    throw Error("no model.safetensors or model.safetensors.index.json in " + dir);

  const std::string ipath = index.string();
  nlohmann::json j = read_json_file(ipath);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(ipath + ": no 'weight_map' object");
  const nlohmann::json& wm = j["weight_map"];
  if (wm.empty()) throw Error(ipath + ": 'weight_map' is empty");

  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    if (!it.value().is_string())
      throw Error(ipath + ": weight_map entry '" + it.key() + "' is not a string");
    const std::string shard = it.value().get<std::string>();
    // Shards are named relative to the folder; a path could point the loader anywhere.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      throw Error(ipath + ": weight_map entry '" + it.key() + "' names '" + shard +
                  "', which is not a file name in the folder");
    shards.emplace(shard, nullptr);
  }
  for (auto& [shard, file] : shards) {
    const fs::path sp = folder / shard;
    if (!fs::is_regular_file(sp, ec))
      throw Error(ipath + ": shard '" + shard + "' does not exist in " + dir);
    file = SafetensorsFile::open(sp.string());
    ws.files_.push_back(file);
  }
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    const std::string shard = it.value().get<std::string>();
    const TensorView* t = shards.at(shard)->find(it.key());
    if (!t)
      throw Error(ipath + ": tensor '" + it.key() + "' is listed in weight_map but missing from " +
                  shard);
    ws.index_[it.key()] = t;
  }
  return ws;
}

const TensorView* WeightStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& WeightStore::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) throw Error(name + ": missing from the checkpoint");
  return *t;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::vector<std::string_view> pieces;
  pieces.reserve(tensors.size() + 2);
  pieces.emplace_back();  // length + header, filled in below
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__") throw Error(path + ": '__metadata__' cannot be a tensor name");
    if (header.contains(t.name)) throw Error(path + ": tensor '" + t.name + "' given twice");
    uint64_t nbytes = dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0)
        throw Error(path + ": tensor '" + t.name + "' has negative dimension " + std::to_string(d));
      if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes))
        throw Error(path + ": tensor '" + t.name + "' is too large");
    }
    if (nbytes > 0 && t.data == nullptr)
      throw Error(path + ": tensor '" + t.name + "' has no data");
    ojson e = ojson::object();
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + nbytes};
    header[t.name] = std::move(e);
    pieces.emplace_back(static_cast<const char*>(t.data), static_cast<std::size_t>(nbytes));
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ojson::type_error& e) {
    throw Error(path + ": cannot encode header: " + e.what());
  }
  // Padding keeps the data buffer 8-byte aligned in the file, and so in the mapping.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  put_u64_le(reinterpret_cast<unsigned char*>(head.data()), text.size());
  head += text;
  pieces[0] = head;
  write_file_atomic(path, pieces);
}

}  // namespace parity::io
