#include "frontends/server/choice_text.h"

#include <algorithm>

namespace parity::server {

ChoiceText::ChoiceText(const TextCodec* codec, std::vector<std::string> stops, bool skip_special_tokens)
    : stops_(std::move(stops)) {
  if (codec) stream_ = codec->stream(skip_special_tokens);
}

std::string ChoiceText::push(int32_t id) {
  if (stopped_ || !stream_) return {};
  held_ += stream_->push(id);
  return release();
}

std::string ChoiceText::finish() {
  if (stopped_ || !stream_) return {};
  held_ += stream_->flush();
  std::string out = release();  // a stop string may still complete in the flushed bytes
  if (!stopped_) {
    out += held_;
    held_.clear();
  }
  return out;
}

std::string ChoiceText::release() {
  // The earliest stop string wins; the text before it is final, the stop string and the rest go.
  std::size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    const std::size_t at = held_.find(s);
    if (at != std::string::npos && at < cut) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Keep the longest tail of held_ that is a proper prefix of some stop string.
  std::size_t keep = 0;
  for (const std::string& s : stops_)
    for (std::size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len)
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

}  // namespace parity::server
