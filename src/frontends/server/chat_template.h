#pragma once
// Chat templates (tokenizer_config.json's "chat_template", a Jinja2 program) rendered by a small
// interpreter of the Jinja subset chat templates use. What it supports is listed in
// docs/serving.md; anything else is refused with an error naming the construct, never guessed.
#include <optional>
#include <string>
#include <vector>

namespace parity::server {

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatTemplateInput {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::optional<std::string> bos_token, eos_token;
};

// Throws parity::Error naming what the template uses that the subset lacks, or the template's own
// raise_exception message.
std::string render_chat_template(const std::string& source, const ChatTemplateInput& in);

}  // namespace parity::server
