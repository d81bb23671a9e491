// parity's Jinja subset against Jinja2 itself: every case of tests/data/chat_templates/cases.json
// (templates in the styles of ChatML, Llama 2 and Granite × conversations) was rendered by Jinja2
// configured as Hugging Face's apply_chat_template (tools/chat_template_cases.py); parity must give
// the same text, the same raise_exception message, or — for constructs outside the subset — an
// error naming the construct.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "frontends/server/chat_template.h"

namespace parity::server {
namespace {

TEST(ServerChatTemplate, MatchesJinja2OnEveryCase) {
  std::ifstream f(std::string(PARITY_TEST_DATA) + "/chat_templates/cases.json");
  ASSERT_TRUE(f) << "tests/data/chat_templates/cases.json";
  const nlohmann::json data = nlohmann::json::parse(f);
  int rendered = 0, raised = 0, refused = 0;
  for (const auto& c : data["cases"]) {
    const std::string name = c["template"];
    SCOPED_TRACE(name + " " + c["messages"].dump());
    ChatTemplateInput in;
    for (const auto& m : c["messages"]) in.messages.push_back({m["role"], m["content"]});
    in.add_generation_prompt = c["add_generation_prompt"];
    in.bos_token = c["special_tokens"]["bos_token"].get<std::string>();
    in.eos_token = c["special_tokens"]["eos_token"].get<std::string>();
    const std::string tmpl = data["templates"][name];
    if (c.value("unsupported", false)) {
      try {
        render_chat_template(tmpl, in);
        ADD_FAILURE() << "rendered a template outside the subset";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
        ++refused;
      }
    } else if (c.contains("raises")) {
      try {
        render_chat_template(tmpl, in);
        ADD_FAILURE() << "no exception";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), c["raises"].get<std::string>());
        ++raised;
      }
    } else {
      EXPECT_EQ(render_chat_template(tmpl, in), c["expected"].get<std::string>());
      ++rendered;
    }
  }
  EXPECT_EQ(rendered, 14);
  EXPECT_EQ(raised, 1);
  EXPECT_EQ(refused, 2);
}

TEST(ServerChatTemplate, MalformedTemplatesAreErrorsNotCrashes) {
  ChatTemplateInput in;
  in.messages = {{"user", "hi"}};
  for (const char* t : {"{% if x %}", "{% for %}", "{{ 1 +", "{{ 'abc", "{% endfor %}", "{{ [1, 2][5:1:0] }}",
                        "{{ 1 // 0 }}", "{% set %}", "{{ range(1000000000) }}", "{# open",
                        "{{ 999999999999999999 * 999999999999999999 }}", "{{ 'ab' * 999999999999999999 }}",
                        "{{ range(1, 999999999999999999, 999999999999999999) | length }}{{ x.y.z() }}"}) {
    SCOPED_TRACE(t);
    EXPECT_THROW(render_chat_template(t, in), Error);
  }
}

}  // namespace
}  // namespace parity::server
