#pragma once
// One choice's text as its tokens arrive: incremental detokenization plus stop strings. Text that
// could still turn out to be the start of a stop string is held back until it cannot, so a
// streamed choice never shows text that a stop string later removes (vLLM's behaviour).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frontends/server/text_codec.h"

namespace parity::server {

class ChoiceText {
 public:
  // codec may be nullptr (no tokenizer: no text, and then there are no stop strings either).
  ChoiceText(const TextCodec* codec, std::vector<std::string> stops, bool skip_special_tokens);

  // The text that is final after this token ("" while held back). After a stop string matched,
  // the text before it is returned once and stopped() turns true; later pushes return "".
  std::string push(int32_t id);
  // End of the choice: whatever was held back (nothing when a stop string matched).
  std::string finish();
  bool stopped() const { return stopped_; }
  const std::string& matched_stop() const { return matched_; }

 private:
  std::string release();
  std::unique_ptr<TextStream> stream_;
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace parity::server
