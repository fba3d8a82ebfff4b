#include <attnzoo/decoding/tokenizer.h>

#include <attnzoo/decoding/text_scan.h>

#include <cctype>

#include <utility>

namespace attnzoo::decoding {
namespace {

using detail::is_white;
using detail::trimmed;

const std::string kSpacePiece = "\xE2\x96\x81";  // U+2581, "▁"
const std::string kSpaceWord = "<space>";

}  // namespace

Tokenizer::Tokenizer(Units units, TextJoin join,
                     std::shared_ptr<const SentencePieceModel> sentencepiece)
    : units_(std::move(units)), join_(join), sentencepiece_(std::move(sentencepiece)) {
  if (join_ == TextJoin::kCharacters) {
    space_id_ = units_.id(kSpacePiece);
    if (space_id_ < 0) space_id_ = units_.id(kSpaceWord);
  }
}

int64_t Tokenizer::id_of(const std::string& token, const std::string& where) const {
  const int64_t id = units_.id(token);
  if (id >= 0 && id != units_.blank_id() && id != units_.sos_eos_id()) return id;
  if (units_.unk_id() >= 0) return units_.unk_id();
  throw DecodingError((where.empty() ? std::string() : where + ": ") + "'" + token +
                      "' is not a token of " + units_.source() + ", which has no <unk>");
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, const std::string& where) const {
  text = trimmed(text);
  std::vector<int64_t> ids;
  if (join_ == TextJoin::kSentencePiece) {
    if (!sentencepiece_) {
      throw DecodingError((where.empty() ? std::string() : where + ": ") +
                          "text of a SentencePiece table (" + units_.source() +
                          ") is cut into pieces by its model: give the .model file");
    }
    for (const auto& piece : sentencepiece_->encode_pieces(std::string(text))) {
      ids.push_back(id_of(piece, where));
    }
    return ids;
  }
  if (join_ == TextJoin::kWordPiece) {
    // Words end at white space; each ASCII punctuation mark is a word of its own.
    size_t i = 0;
    while (i < text.size()) {
      if (is_white(text[i])) {
        ++i;
        continue;
      }
      size_t end = i + 1;
      if (!std::ispunct(static_cast<unsigned char>(text[i]))) {
        while (end < text.size() && !is_white(text[end]) &&
               !std::ispunct(static_cast<unsigned char>(text[end]))) {
          ++end;
        }
      }
      for (const auto id : encode_wordpiece(text.substr(i, end - i), where)) ids.push_back(id);
      i = end;
    }
    return ids;
  }
  size_t i = 0;
  while (i < text.size()) {
    if (is_white(text[i])) {
      while (i < text.size() && is_white(text[i])) ++i;
      if (join_ == TextJoin::kCharacters && space_id_ >= 0) ids.push_back(space_id_);
      continue;
    }
    size_t end = i;
    if (join_ == TextJoin::kWords) {
      while (end < text.size() && !is_white(text[end])) ++end;
    } else {
      end = i + detail::character_length(text, i);
    }
    ids.push_back(id_of(std::string(text.substr(i, end - i)), where));
    i = end;
  }
  return ids;
}

std::vector<int64_t> Tokenizer::encode_wordpiece(std::string_view word,
                                                 const std::string& where) const {
  constexpr size_t kMaxWordBytes = 100;  // BERT's max_input_chars_per_word
  const int64_t unk = units_.id("[UNK]");
  const auto unknown = [&]() -> std::vector<int64_t> {
    if (unk >= 0) return {unk};
    throw DecodingError((where.empty() ? std::string() : where + ": ") + "'" + std::string(word) +
                        "' is not made of tokens of " + units_.source() + ", which has no [UNK]");
  };
  if (word.size() > kMaxWordBytes) return unknown();
  std::vector<int64_t> ids;
  for (size_t start = 0; start < word.size();) {
    int64_t found = -1;
    size_t end = word.size();
    for (; end > start; --end) {
      // Whole UTF-8 characters only.
      if (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) continue;
      const auto piece = (start > 0 ? std::string("##") : std::string()) +
                         std::string(word.substr(start, end - start));
      const int64_t id = units_.id(piece);
      if (id >= 0 && id != units_.blank_id() && id != units_.sos_eos_id()) {
        found = id;
        break;
      }
    }
    if (found < 0) return unknown();
    ids.push_back(found);
    start = end;
  }
  return ids;
}

std::string Tokenizer::token_text(int64_t id) const {
  const auto& token = units_.token(id);
  if (id == space_id_) return " ";
  if (join_ == TextJoin::kWordPiece) return wordpiece_token_text(token, /*first=*/false);
  if (join_ != TextJoin::kSentencePiece) return token;
  // Every "▁" a space, the leading one included: it marks where a word starts.
  std::string text;
  for (size_t at = 0; at < token.size();) {
    if (token.compare(at, kSpacePiece.size(), kSpacePiece) == 0) {
      text += ' ';
      at += kSpacePiece.size();
    } else {
      text += token[at++];
    }
  }
  return text;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  if (join_ == TextJoin::kSentencePiece && sentencepiece_) {
    return sentencepiece_->decode_pieces(units_.pieces(ids));
  }
  if (join_ != TextJoin::kCharacters) return units_.text(ids, join_);
  std::string text;
  for (const auto& piece : units_.pieces(ids)) {
    text += piece == kSpacePiece || piece == kSpaceWord ? std::string(" ") : piece;
  }
  return std::string(trimmed(text));
}

}  // namespace attnzoo::decoding
