#pragma once
// What a checkpoint folder says about its tokenizer besides tokenizer.json: tokenizer_config.json's
// eos_token / bos_token (a string or {"content": …}) and chat_template (a string, or a list of
// {name, template} from which "default" is taken), and chat_template.jinja, which newer
// transformers write instead and which wins when both exist.
#include <string>

namespace parity::tokenizer {

class Tokenizer;

// Reads the files in `folder` that exist; a malformed one is an error naming it.
void apply_tokenizer_config(Tokenizer& t, const std::string& folder);

}  // namespace parity::tokenizer
