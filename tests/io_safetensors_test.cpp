#include <gtest/gtest.h>

#include "error_test_support.h"
#include "test_support.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using parity::DType;
using parity::Error;
using namespace parity::io;

namespace {

class IoSafetensors : public parity::test::ScratchDirTest {};
class IoWeightStore : public parity::test::ScratchDirTest {};

using parity::test::read_file;

void write_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string u64le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file laid out by hand, so each malformation is exactly the one under test.
void write_raw(const std::string& p, const std::string& header, std::size_t buffer_bytes) {
  write_bytes(p, u64le(header.size()) + header + std::string(buffer_bytes, '\x5a'));
}

using parity::test::expect_error;

void expect_open_error(const std::string& p, std::vector<std::string> parts) {
  parts.push_back(p);
  expect_error([&] { SafetensorsFile::open(p); }, parts);
}

}  // namespace

TEST_F(IoSafetensors, RoundTripAllDtypes) {
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0e-38f, 7.0f, 0.0f, -0.0f};
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0001, 0x7c00, 0x7bff};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x7f80, 0x0001, 0x1234, 0xffff, 0x4000};
  const std::vector<int32_t> i32 = {0, -1, 2147483647, -2147483647 - 1};
  const std::vector<int64_t> i64 = {1ll << 40, -5, 9223372036854775807ll};
  std::vector<TensorToWrite> ts = {
      {"w.f32", DType::F32, {2, 3}, f32.data()},
      {"w.f16", DType::F16, {5}, f16.data()},
      {"w.bf16", DType::BF16, {7, 1}, bf16.data()},
      {"w.i32", DType::I32, {2, 2}, i32.data()},
      {"w.i64", DType::I64, {3}, i64.data()},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode"}};
  write_safetensors(path("a.safetensors"), ts, meta);

  auto f = SafetensorsFile::open(path("a.safetensors"));
  ASSERT_EQ(f->tensors().size(), ts.size());
  EXPECT_EQ(f->metadata(), meta);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const TensorView& v = f->tensors()[i];
    EXPECT_EQ(v.name, ts[i].name);  // file order is the order given to the writer
    EXPECT_EQ(v.dtype, ts[i].dtype);
    EXPECT_EQ(v.shape, ts[i].shape);
    ASSERT_EQ(v.nbytes, static_cast<std::size_t>(v.numel()) * parity::dtype_size(v.dtype));
    EXPECT_EQ(std::memcmp(v.data, ts[i].data, v.nbytes), 0) << v.name;
    EXPECT_EQ(f->find(v.name), &v);
  }
  EXPECT_EQ(f->find("absent"), nullptr);

  const std::string bytes = read_file(path("a.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  // The buffer starts 8-aligned in the file and the mapping is page-aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensors()[0].data) % 8, 0u);
}

TEST_F(IoSafetensors, RoundTripScalarAndEmptyTensors) {
  const float scalar = 42.0f;
  const int64_t pair[2] = {3, 4};
  write_safetensors(path("s.safetensors"), {{"empty", DType::F32, {0, 3}, nullptr},
                                             {"scalar", DType::F32, {}, &scalar},
                                             {"empty2", DType::BF16, {4, 0}, nullptr},
                                             {"pair", DType::I64, {2}, pair}});
  auto f = SafetensorsFile::open(path("s.safetensors"));
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->find("empty")->nbytes, 0u);
  EXPECT_EQ(f->find("empty2")->numel(), 0);
  EXPECT_EQ(f->find("scalar")->numel(), 1);
  EXPECT_EQ(*static_cast<const float*>(f->find("scalar")->data), 42.0f);
  // "pair" starts at byte 4: safetensors packs tensors back to back, so views need not be
  // aligned for their dtype and are read with memcpy.
  int64_t got[2];
  std::memcpy(got, f->find("pair")->data, sizeof got);
  EXPECT_EQ(got[1], 4);
  EXPECT_TRUE(f->metadata().empty());
}

TEST_F(IoSafetensors, EmptyFileRoundTrips) {
  write_safetensors(path("e.safetensors"), {}, {{"k", "v"}});
  auto f = SafetensorsFile::open(path("e.safetensors"));
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata().at("k"), "v");
}

TEST_F(IoSafetensors, WriterIsDeterministicAndKeepsGivenOrder) {
  const float a[2] = {1, 2}, b[1] = {3};
  std::vector<TensorToWrite> ts = {{"z", DType::F32, {2}, a}, {"a", DType::F32, {1}, b}};
  write_safetensors(path("1.safetensors"), ts, {{"m", "1"}});
  write_safetensors(path("2.safetensors"), ts, {{"m", "1"}});
  EXPECT_EQ(read_file(path("1.safetensors")), read_file(path("2.safetensors")));
  auto f = SafetensorsFile::open(path("1.safetensors"));
  EXPECT_EQ(f->tensors()[0].name, "z");
  EXPECT_EQ(f->tensors()[1].name, "a");
  EXPECT_EQ(static_cast<const char*>(f->tensors()[1].data) -
                static_cast<const char*>(f->tensors()[0].data),
            8);
}

TEST_F(IoSafetensors, WriterReplacesExistingFileAndLeavesNoTempFiles) {
  write_bytes(path("x.safetensors"), "old contents");
  const int32_t v[3] = {7, 8, 9};
  write_safetensors(path("x.safetensors"), {{"v", DType::I32, {3}, v}});
  auto f = SafetensorsFile::open(path("x.safetensors"));
  EXPECT_EQ(static_cast<const int32_t*>(f->find("v")->data)[2], 9);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST_F(IoSafetensors, WriterRefusesBadInput) {
  const float a[1] = {1};
  expect_error([&] {
    write_safetensors(path("d.safetensors"), {{"t", DType::F32, {1}, a}, {"t", DType::F32, {1}, a}});
  }, {"d.safetensors", "'t' given twice"});
  expect_error([&] {
    write_safetensors(path("d.safetensors"), {{"t", DType::F32, {-1}, a}});
  }, {"negative dimension"});
  expect_error([&] {
    write_safetensors(path("d.safetensors"), {{"__metadata__", DType::F32, {1}, a}});
  }, {"__metadata__"});
  expect_error([&] {
    write_safetensors(path("d.safetensors"), {{"t", DType::F32, {2}, nullptr}});
  }, {"no data"});
  expect_error([&] { write_safetensors(path("no/such/dir/d.safetensors"), {}); },
               {"cannot write", "no/such/dir/d.safetensors"});
  EXPECT_FALSE(fs::exists(path("d.safetensors")));
}

TEST_F(IoSafetensors, MissingFile) {
  expect_open_error(path("nope.safetensors"), {"cannot open"});
}

TEST_F(IoSafetensors, TruncatedFile) {
  write_bytes(path("t.safetensors"), std::string("\x10\x00\x00", 3));
  expect_open_error(path("t.safetensors"), {"3 bytes", "too short"});
  write_bytes(path("t0.safetensors"), "");
  expect_open_error(path("t0.safetensors"), {"0 bytes", "too short"});
}

TEST_F(IoSafetensors, TruncatedData) {
  const float a[4] = {1, 2, 3, 4};
  write_safetensors(path("full.safetensors"), {{"a", DType::F32, {4}, a}});
  std::string bytes = read_file(path("full.safetensors"));
  write_bytes(path("cut.safetensors"), bytes.substr(0, bytes.size() - 4));
  expect_open_error(path("cut.safetensors"), {"tensor 'a'", "[0, 16)", "outside the 12-byte"});
}

TEST_F(IoSafetensors, HeaderLengthBeyondFile) {
  write_bytes(path("h.safetensors"), u64le(1000) + "{}");
  expect_open_error(path("h.safetensors"), {"header length 1000", "past the end", "10 bytes"});
  write_bytes(path("huge.safetensors"), u64le(~0ull) + "{}");
  expect_open_error(path("huge.safetensors"), {"past the end"});
}

TEST_F(IoSafetensors, HeaderLengthTooSmall) {
  write_bytes(path("z.safetensors"), u64le(0));
  expect_open_error(path("z.safetensors"), {"header length 0", "too small"});
}

TEST_F(IoSafetensors, HeaderNotJson) {
  write_raw(path("j.safetensors"), "{\"a\": {\"dtype\": ", 0);
  expect_open_error(path("j.safetensors"), {"header is not valid JSON", "syntax error"});
}

// Found by fuzzing: a float past double's range is nlohmann's out_of_range, which must become a parity::Error.
TEST_F(IoSafetensors, HeaderNumberOverflow) {
  write_raw(path("f.safetensors"), R"({"__metadata__": {}, "x": 1e400})", 0);
  expect_open_error(path("f.safetensors"), {"header is not valid JSON", "outside the range of a double"});
}

TEST_F(IoSafetensors, HeaderNotObject) {
  write_raw(path("o.safetensors"), "[1, 2, 3]", 0);
  expect_open_error(path("o.safetensors"), {"header is not a JSON object"});
}

TEST_F(IoSafetensors, EntryWithWrongJsonTypes) {
  write_raw(path("e1.safetensors"), R"({"x": [1]})", 0);
  expect_open_error(path("e1.safetensors"), {"tensor 'x' is not a JSON object"});
  write_raw(path("e2.safetensors"), R"({"x": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", 4);
  expect_open_error(path("e2.safetensors"), {"tensor 'x'", "dtype"});
  write_raw(path("e3.safetensors"), R"({"x": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 4);
  expect_open_error(path("e3.safetensors"), {"tensor 'x'", "shape"});
  write_raw(path("e4.safetensors"), R"({"x": {"dtype": "F32", "shape": [1]}})", 4);
  expect_open_error(path("e4.safetensors"), {"tensor 'x'", "data_offsets"});
  write_raw(path("e5.safetensors"), R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4);
  expect_open_error(path("e5.safetensors"), {"tensor 'x'", "data_offsets must be two"});
  write_raw(path("e6.safetensors"), R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4);
  expect_open_error(path("e6.safetensors"), {"tensor 'x'", "data_offsets must be two"});
  write_raw(path("e7.safetensors"), R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4);
  expect_open_error(path("e7.safetensors"), {"tensor 'x'", "non-integer dimension 1.5"});
  write_raw(path("e8.safetensors"), R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4);
  expect_open_error(path("e8.safetensors"), {"tensor 'x'", "[4, 0) ends before it begins"});
}

TEST_F(IoSafetensors, UnknownDtype) {
  write_raw(path("u.safetensors"),
            R"({"emb": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})", 4);
  expect_open_error(path("u.safetensors"), {"tensor 'emb'", "unsupported dtype 'F8_E4M3'"});
}

TEST_F(IoSafetensors, NegativeDimension) {
  write_raw(path("n.safetensors"),
            R"({"x": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 0]}})", 0);
  expect_open_error(path("n.safetensors"), {"tensor 'x'", "negative dimension -1"});
}

TEST_F(IoSafetensors, ShapeByteMismatch) {
  write_raw(path("m.safetensors"),
            R"({"x": {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, 96]}})", 96);
  expect_open_error(path("m.safetensors"),
                    {": tensor 'x' byte range [0, 96) does not match shape [4, 8] × F32 = 128 bytes"});
  write_raw(path("big.safetensors"),
            R"({"x": {"dtype": "I64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8);
  expect_open_error(path("big.safetensors"), {"tensor 'x'", "more than 2^64"});
}

TEST_F(IoSafetensors, OverlappingRanges) {
  write_raw(path("ov.safetensors"),
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
            16);
  expect_open_error(path("ov.safetensors"), {"tensor 'b'", "[8, 16)", "overlaps tensor 'a'", "[0, 16)"});
}

TEST_F(IoSafetensors, EmptyTensorInsideAnotherIsAnOverlap) {
  write_raw(path("ov0.safetensors"),
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}})",
            16);
  expect_open_error(path("ov0.safetensors"), {"tensor 'e'", "overlaps tensor 'a'"});
}

TEST_F(IoSafetensors, RangeOutOfBounds) {
  write_raw(path("oob.safetensors"),
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 16);
  expect_open_error(path("oob.safetensors"), {"tensor 'a'", "[8, 24)", "outside the 16-byte data buffer"});
}

TEST_F(IoSafetensors, GapInCoverage) {
  write_raw(path("gap.safetensors"),
            R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
            12);
  expect_open_error(path("gap.safetensors"), {"bytes [4, 8) of the data buffer belong to no tensor"});
}

TEST_F(IoSafetensors, LeadingGap) {
  write_raw(path("lead.safetensors"),
            R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8);
  expect_open_error(path("lead.safetensors"), {"bytes [0, 4)", "belong to no tensor"});
}

TEST_F(IoSafetensors, TrailingBytesBeyondLastTensor) {
  write_raw(path("tail.safetensors"),
            R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 10);
  expect_open_error(path("tail.safetensors"), {"bytes [4, 10)", "belong to no tensor"});
}

TEST_F(IoSafetensors, DuplicateTensorName) {
  write_raw(path("dup.safetensors"),
            R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
            8);
  expect_open_error(path("dup.safetensors"), {"tensor 'a' appears twice"});
}

TEST_F(IoSafetensors, MetadataMustBeStringMap) {
  write_raw(path("md1.safetensors"), R"({"__metadata__": {"n": 3}})", 0);
  expect_open_error(path("md1.safetensors"), {"__metadata__ entry 'n' is not a string"});
  write_raw(path("md2.safetensors"), R"({"__metadata__": ["x"]})", 0);
  expect_open_error(path("md2.safetensors"), {"__metadata__ is not a JSON object"});
}

TEST_F(IoSafetensors, HeaderWithTrailingSpacesAndHandWrittenOrder) {
  // Header padding is whitespace after the object; ranges may be listed in any order.
  write_raw(path("ok.safetensors"),
            R"({"b": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]},
                "a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}      )",
            8);
  auto f = SafetensorsFile::open(path("ok.safetensors"));
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].name, "b");
  EXPECT_EQ(static_cast<const char*>(f->find("b")->data) -
                static_cast<const char*>(f->find("a")->data),
            4);
}

TEST_F(IoSafetensors, NotARegularFile) {
  expect_open_error(dir_.string(), {"not a regular file"});
}

TEST_F(IoWeightStore, SingleFile) {
  const float a[2] = {1, 2};
  const int64_t b[1] = {5};
  write_safetensors(path("model.safetensors"), {{"w.b", DType::I64, {1}, b}, {"w.a", DType::F32, {2}, a}});
  WeightStore ws = WeightStore::open_folder(dir_.string());
  EXPECT_EQ(ws.names(), (std::vector<std::string>{"w.a", "w.b"}));
  EXPECT_EQ(static_cast<const float*>(ws.get("w.a").data)[1], 2.0f);
  EXPECT_EQ(ws.find("nope"), nullptr);
  expect_error([&] { ws.get("lm_head.weight"); }, {"lm_head.weight: missing"});
}

TEST_F(IoWeightStore, ShardedIndex) {
  const float a[2] = {1, 2}, b[3] = {3, 4, 5}, c[1] = {6};
  write_safetensors(path("model-00001-of-00002.safetensors"),
                    {{"layers.0.w", DType::F32, {2}, a}, {"embed", DType::F32, {3}, b}});
  write_safetensors(path("model-00002-of-00002.safetensors"), {{"layers.1.w", DType::F32, {1}, c}});
  write_bytes(path("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 24},
    "weight_map": {
      "embed": "model-00001-of-00002.safetensors",
      "layers.0.w": "model-00001-of-00002.safetensors",
      "layers.1.w": "model-00002-of-00002.safetensors"
    }})");
  WeightStore ws = WeightStore::open_folder(dir_.string());
  EXPECT_EQ(ws.names(), (std::vector<std::string>{"embed", "layers.0.w", "layers.1.w"}));
  EXPECT_EQ(static_cast<const float*>(ws.get("embed").data)[2], 5.0f);
  EXPECT_EQ(static_cast<const float*>(ws.get("layers.1.w").data)[0], 6.0f);

  // Copies share the mapped shards; views stay valid after the original goes away.
  WeightStore copy = [&] { WeightStore tmp = WeightStore::open_folder(dir_.string()); return tmp; }();
  EXPECT_EQ(static_cast<const float*>(copy.get("layers.0.w").data)[1], 2.0f);
}

TEST_F(IoWeightStore, IndexedNameMissingFromShard) {
  const float a[1] = {1};
  write_safetensors(path("s1.safetensors"), {{"x", DType::F32, {1}, a}});
  write_bytes(path("model.safetensors.index.json"),
              R"({"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors"}})");
  expect_error([&] { WeightStore::open_folder(dir_.string()); },
               {"model.safetensors.index.json", "tensor 'y'", "missing from s1.safetensors"});
}

TEST_F(IoWeightStore, IndexProblems) {
  write_bytes(path("model.safetensors.index.json"), R"({"weight_map": {"x": "s9.safetensors"}})");
  expect_error([&] { WeightStore::open_folder(dir_.string()); }, {"shard 's9.safetensors' does not exist"});
  write_bytes(path("model.safetensors.index.json"), R"({"weight_map": {"x": "../escape.safetensors"}})");
  expect_error([&] { WeightStore::open_folder(dir_.string()); }, {"not a file name in the folder"});
  write_bytes(path("model.safetensors.index.json"), R"({"metadata": {}})");
  expect_error([&] { WeightStore::open_folder(dir_.string()); },
               {"model.safetensors.index.json", "no 'weight_map'"});
  write_bytes(path("model.safetensors.index.json"), R"({"weight_map": {"x": 1}})");
  expect_error([&] { WeightStore::open_folder(dir_.string()); }, {"'x' is not a string"});
  write_bytes(path("model.safetensors.index.json"), R"({"weight_map": {)");
  expect_error([&] { WeightStore::open_folder(dir_.string()); },
               {"model.safetensors.index.json", "invalid JSON"});
}

TEST_F(IoWeightStore, BadShardIsReportedWithItsPath) {
  write_bytes(path("s1.safetensors"), "abc");
  write_bytes(path("model.safetensors.index.json"), R"({"weight_map": {"x": "s1.safetensors"}})");
  expect_error([&] { WeightStore::open_folder(dir_.string()); }, {"s1.safetensors", "too short"});
}

TEST_F(IoWeightStore, MissingFolderOrFiles) {
  expect_error([&] { WeightStore::open_folder(dir_.string()); },
               {"no model.safetensors or model.safetensors.index.json in " + dir_.string()});
  const std::string missing = path("does-not-exist");
  expect_error([&] { WeightStore::open_folder(missing); },
               {"no model.safetensors or model.safetensors.index.json in " + missing});
}

TEST(IoWeightStoreFixture, TransformersWrittenCheckpoint) {
  const std::string dir = std::string(PARITY_TEST_DATA) + "/mamba2_g1";
  ASSERT_TRUE(fs::exists(dir + "/model.safetensors")) << "the committed fixture " << dir << "/model.safetensors is missing";
  WeightStore ws = WeightStore::open_folder(dir);
  const TensorView& emb = ws.get("backbone.embeddings.weight");
  ASSERT_EQ(emb.shape.size(), 2u);
  EXPECT_EQ(emb.nbytes, static_cast<std::size_t>(emb.numel()) * parity::dtype_size(emb.dtype));
  auto logits = SafetensorsFile::open(dir + "/reference_logits.safetensors");
  ASSERT_NE(logits->find("logits"), nullptr);
  EXPECT_EQ(logits->find("logits")->dtype, DType::F32);
}
