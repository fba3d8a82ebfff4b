// Scanning UTF-8 text for the tokenizer and the error rates. Internal to decoding/.
#pragma once

#include <cstddef>
#include <string_view>

namespace attnzoo::decoding::detail {

inline bool is_white(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// `text` without white space at either end.
inline std::string_view trimmed(std::string_view text) {
  while (!text.empty() && is_white(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_white(text.back())) text.remove_suffix(1);
  return text;
}

// The bytes of the character at text[at]: its UTF-8 sequence's length by the lead byte, cut at
// the end of the text; 1 for a byte that leads no sequence (a malformed byte is one character of
// its own, never a read past the end).
inline size_t character_length(std::string_view text, size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  size_t length = 1;
  if ((lead & 0xe0) == 0xc0) length = 2;
  if ((lead & 0xf0) == 0xe0) length = 3;
  if ((lead & 0xf8) == 0xf0) length = 4;
  return length < text.size() - at ? length : text.size() - at;
}

}  // namespace attnzoo::decoding::detail
