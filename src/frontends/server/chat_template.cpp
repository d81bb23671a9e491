#include "frontends/server/chat_template.h"

#include "common/error.h"

namespace parity::server {

std::string render_chat_template(const std::string&, const ChatTemplateInput&) {
  throw Error("chat templates are not rendered yet");
}

}  // namespace parity::server
