// The server's text-side pieces: SSE framing, stop strings over a streamed choice, and the API
// key comparison.
#include <gtest/gtest.h>

#include "frontends/server/auth.h"
#include "frontends/server/choice_text.h"
#include "frontends/server/sse.h"
#include "server_test_codec.h"

namespace parity::server {
namespace {

TEST(ServerSse, OneDataLinePerEventAndDone) {
  const std::string e = sse_event({{"text", "a\nb"}, {"n", 1}});
  EXPECT_EQ(e, "data: {\"n\":1,\"text\":\"a\\nb\"}\n\n");  // the newline stays escaped inside the JSON
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_keepalive().front(), ':');  // an SSE comment: clients ignore it
  // Invalid UTF-8 in generated text is replaced, not thrown.
  EXPECT_EQ(sse_event({{"t", std::string("\xff")}}), "data: {\"t\":\"\xEF\xBF\xBD\"}\n\n");
}

std::vector<int32_t> ids(const std::string& s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(int32_t(c) + 1);
  return v;
}

// Streams `text` one byte-token at a time and returns what was released, piece by piece.
std::vector<std::string> stream(ChoiceText& t, const std::string& text) {
  std::vector<std::string> out;
  for (int32_t id : ids(text)) out.push_back(t.push(id));
  return out;
}

TEST(ServerChoiceText, StopStringCutsAndHoldsBackItsPrefix) {
  test::ByteCodec codec;
  ChoiceText t(&codec, {"##"}, true);
  auto pieces = stream(t, "ab#c#");
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "b", "", "#c", ""}));  // '#' waits until it cannot start "##"
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.push('#' + 1), "");  // "##" matched: the held '#' is dropped with it
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.matched_stop(), "##");
  EXPECT_EQ(t.push('z' + 1), "");
  EXPECT_EQ(t.finish(), "");
}

TEST(ServerChoiceText, EarliestStopWinsAndHeldTextFlushes) {
  test::ByteCodec codec;
  ChoiceText t(&codec, {"cd", "bcx"}, true);
  std::string all;
  for (const auto& p : stream(t, "abcd")) all += p;
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(all, "ab");
  EXPECT_EQ(t.matched_stop(), "cd");
  ChoiceText u(&codec, {"xyz"}, true);
  std::string got;
  for (const auto& p : stream(u, "abxy")) got += p;
  EXPECT_EQ(got, "ab");
  EXPECT_EQ(u.finish(), "xy");  // the end of the choice releases what was held
}

TEST(ServerChoiceText, NoTokenizerNoText) {
  ChoiceText t(nullptr, {}, true);
  EXPECT_EQ(t.push(5), "");
  EXPECT_EQ(t.finish(), "");
}

TEST(ServerAuth, BearerKey) {
  EXPECT_TRUE(bearer_matches("Bearer k3y", "k3y"));
  EXPECT_FALSE(bearer_matches("Bearer k3", "k3y"));
  EXPECT_FALSE(bearer_matches("Bearer k3yy", "k3y"));
  EXPECT_FALSE(bearer_matches("bearer k3y", "k3y"));
  EXPECT_FALSE(bearer_matches("k3y", "k3y"));
  EXPECT_FALSE(bearer_matches("", "k3y"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("a", ""));
}

}  // namespace
}  // namespace parity::server
