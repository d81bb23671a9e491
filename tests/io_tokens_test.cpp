#include <gtest/gtest.h>

#include "error_test_support.h"
#include "test_support.h"

#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "io/token_file.h"

using parity::Error;
using namespace parity::io;

namespace {

class IoTokens : public parity::test::ScratchDirTest {};

using parity::test::expect_error;

using Tokens = std::vector<int32_t>;

}  // namespace

TEST_F(IoTokens, InlineLists) {
  EXPECT_EQ(read_tokens("1,2,3"), (Tokens{1, 2, 3}));
  EXPECT_EQ(read_tokens(" 4 , 5 ,6 "), (Tokens{4, 5, 6}));
  EXPECT_EQ(read_tokens("7"), (Tokens{7}));
  EXPECT_EQ(read_tokens("0,2147483647"), (Tokens{0, 2147483647}));
}

TEST_F(IoTokens, JsonFile) {
  std::string p = write("t.json", "[10, 0, 32767]\n");
  EXPECT_EQ(read_tokens(p), (Tokens{10, 0, 32767}));
}

TEST_F(IoTokens, EmptyLists) {
  expect_error([] { read_tokens(""); }, {"token list is empty"});
  expect_error([] { read_tokens("  "); }, {"token list is empty"});
  std::string p = write("e.json", "[]");
  expect_error([&] { read_tokens(p); }, {p, "token list is empty"});
}

TEST_F(IoTokens, NonIntegerEntries) {
  expect_error([] { read_tokens("1,x,3"); }, {"token list entry 1 ('x') is not an integer"});
  expect_error([] { read_tokens("1,2.5"); }, {"token list entry 1 ('2.5') is not an integer"});
  expect_error([] { read_tokens("1,,2"); }, {"token list entry 1 is empty"});
  expect_error([] { read_tokens("1,2,"); }, {"token list entry 2 is empty"});
  std::string p = write("f.json", "[1, 2.5]");
  expect_error([&] { read_tokens(p); }, {p, "entry 1 (2.5) is not an integer"});
  std::string q = write("s.json", "[1, \"2\"]");
  expect_error([&] { read_tokens(q); }, {q, "entry 1", "is not an integer"});
  std::string r = write("o.json", "{\"tokens\": [1]}");
  expect_error([&] { read_tokens(r); }, {r, "must be a JSON array of integers"});
}

TEST_F(IoTokens, NegativeAndOversizedIds) {
  expect_error([] { read_tokens("1,-2"); }, {"token list entry 1 is negative (-2)"});
  expect_error([] { read_tokens("-1"); }, {"token list entry 0 is negative (-1)"});
  expect_error([] { read_tokens("2147483648"); }, {"(2147483648) is too large for a token id"});
  expect_error([] { read_tokens("99999999999999999999999"); }, {"too large for a token id"});
  std::string p = write("n.json", "[3, -7]");
  expect_error([&] { read_tokens(p); }, {p, "entry 1 is negative (-7)"});
  std::string q = write("big.json", "[18446744073709551615]");
  expect_error([&] { read_tokens(q); }, {q, "(18446744073709551615) is too large"});
}

TEST_F(IoTokens, MalformedJsonNamesTheFile) {
  std::string p = write("bad.json", "[1, 2");
  expect_error([&] { read_tokens(p); }, {p, "invalid JSON"});
}

TEST_F(IoTokens, MissingFile) {
  expect_error([] { read_tokens("nope.json"); }, {"no such token file: nope.json"});
  const std::string missing = (dir_ / "a,b.json").string();
  expect_error([&] { read_tokens(missing); }, {"no such token file: " + missing});
  expect_error([&] { read_tokens(dir_.string()); }, {"is a directory"});
}

TEST_F(IoTokens, WriteRoundTrip) {
  const Tokens t = {5, 0, 2147483647, 12};
  std::string p = (dir_ / "out.json").string();
  write_tokens_json(p, t);
  EXPECT_EQ(read_tokens(p), t);
  std::ifstream in(p);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "[5, 0, 2147483647, 12]\n");
}
