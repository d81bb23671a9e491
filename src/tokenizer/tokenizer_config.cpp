#include "tokenizer/tokenizer_config.h"

#include <filesystem>

#include "common/error.h"
#include "io/file_util.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"

namespace parity::tokenizer {

namespace {

std::optional<std::string> token_name(const nlohmann::json& cfg, const char* key, const std::string& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw Error(path + ": \"" + key + "\" must be a string or {\"content\": …}");
}

std::optional<int32_t> id_of(const Tokenizer& t, const std::optional<std::string>& name, const char* key,
                             const std::string& path) {
  if (!name) return std::nullopt;
  auto id = t.token_to_id(*name);
  if (!id) throw Error(path + ": " + key + " '" + *name + "' is not a token of the tokenizer");
  return id;
}

}  // namespace

void apply_tokenizer_config(Tokenizer& t, const std::string& folder) {
  namespace fs = std::filesystem;
  std::optional<std::string> chat;
  const fs::path cfg_path = fs::path(folder) / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(cfg_path, ec)) {
    const std::string path = cfg_path.string();
    const nlohmann::json cfg = io::read_json_file(path);
    if (!cfg.is_object()) throw Error(path + ": must be a JSON object");
    t.set_special_ids(id_of(t, token_name(cfg, "bos_token", path), "bos_token", path),
                      id_of(t, token_name(cfg, "eos_token", path), "eos_token", path));
    auto it = cfg.find("chat_template");
    if (it != cfg.end() && !it->is_null()) {
      if (it->is_string()) {
        chat = it->get<std::string>();
      } else if (it->is_array()) {
        for (const auto& e : *it)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            chat = e["template"].get<std::string>();
        if (!chat) throw Error(path + ": chat_template list has no \"default\" entry");
      } else {
        throw Error(path + ": \"chat_template\" must be a string or a list of {name, template}");
      }
    }
  }
  const fs::path jinja = fs::path(folder) / "chat_template.jinja";
  if (fs::exists(jinja, ec)) chat = io::read_file_bytes(jinja.string());
  if (chat) t.set_chat_template(chat);
}

}  // namespace parity::tokenizer
