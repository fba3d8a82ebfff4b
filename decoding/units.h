// Token tables of CTC models ("units"): the id of each output of the CTC head and its text, read
// from the files the toolkits ship, and the text of a decoded id sequence.
//
//   WeNet   units.txt / lang_char.txt: one "TOKEN ID" per line, "<blank> 0", "<unk> 1", ...,
//           "<sos/eos>" last (its id is the last output of the CTC head too). The ids must be
//           0 .. N-1, each once, in any order.
//   ESPnet  tokens.txt (the token_list of its config, one per line): the id is the line's index
//           (0-based), "<blank>" first, "<unk>" next, "<sos/eos>" last.
// Both need a "<blank>"; "<unk>" and "<sos/eos>" are optional. Tokens are UTF-8 without
// whitespace (SentencePiece's "▁" stands for a space). Every problem is a UnitsError naming the
// file and the line: a malformed line, an id that is not a number or is past the table's size, a
// duplicate id or token, a missing <blank>, and a size other than the CTC head's (ctc_vocab > 0).
// Reading is bounded: a file of at most kMaxUnitsFileBytes, lines of at most kMaxUnitsLineBytes.
//
// Text: the tokens of the ids, without <blank> and <sos/eos> (<unk> stays as its token),
// concatenated (TextJoin::kCharacters: Chinese characters, letters), separated by one space
// (TextJoin::kWords: a table of whole words), or as SentencePiece joins pieces without its model
// (TextJoin::kSentencePiece): "▁" becomes a space, and the leading "▁" of each piece is dropped
// while nothing has been written yet (SentencePiece's decode with its default add_dummy_prefix),
// or as BERT's WordPiece (TextJoin::kWordPiece: NeMo's `wpe` tokenizers) as NeMo's ASR decoding
// joins them (Hugging Face's WordPiece decoder): each token after the first with a space before
// it, or without its "##" (a continuation of the word before), then that decoder's clean-up of
// each token's text (" ." -> ".", " ," -> ",", " 's" -> "'s", ...); BERT's special tokens stay.
// Byte-fallback pieces (<0x41>) need the model itself (decoding/sentencepiece_model.h). The other
// direction, text to ids, is decoding/tokenizer.h.
#pragma once

#include <attnzoo/decoding/error.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attnzoo::decoding {

inline constexpr int64_t kMaxUnitsFileBytes = 16 << 20;
inline constexpr int64_t kMaxUnitsLineBytes = 1024;

// How a table's tokens make text: "characters", "words", "sentencepiece", "wordpiece" in a
// model's YAML.
enum class TextJoin { kCharacters, kWords, kSentencePiece, kWordPiece };
const char* to_string(TextJoin join);

// The file layout of a table: "wenet" (TOKEN ID lines) or "espnet" (one token per line).
enum class UnitsFormat { kWenet, kEspnet };
const char* to_string(UnitsFormat format);

class Units {
 public:
  // ctc_vocab > 0: the table must have exactly that many tokens.
  static Units read_wenet(const std::string& path, int64_t ctc_vocab = 0);
  static Units read_espnet(const std::string& path, int64_t ctc_vocab = 0);
  static Units read(const std::string& path, UnitsFormat format, int64_t ctc_vocab = 0);
  // The same from a file's bytes; `source` names it in errors.
  static Units parse_wenet(std::string_view text, const std::string& source, int64_t ctc_vocab = 0);
  static Units parse_espnet(std::string_view text, const std::string& source,
                            int64_t ctc_vocab = 0);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& source() const { return source_; }
  // DecodingError when id is outside [0, size()).
  const std::string& token(int64_t id) const;
  // -1 when the table has no such token.
  int64_t id(const std::string& token) const;
  int64_t blank_id() const { return blank_id_; }
  int64_t unk_id() const { return unk_id_; }          // -1: none
  int64_t sos_eos_id() const { return sos_eos_id_; }  // -1: none

  // The tokens of ids without <blank> and <sos/eos>; DecodingError naming the position of an id
  // outside the table.
  std::vector<std::string> pieces(const std::vector<int64_t>& ids) const;
  std::string text(const std::vector<int64_t>& ids, TextJoin join = TextJoin::kCharacters) const;

 private:
  Units(std::vector<std::string> tokens, std::string source, int64_t ctc_vocab);

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  std::string source_;
  int64_t blank_id_ = -1;
  int64_t unk_id_ = -1;
  int64_t sos_eos_id_ = -1;
};

// SentencePiece's join of pieces (TextJoin::kSentencePiece above), on its own.
std::string join_sentencepiece_pieces(const std::vector<std::string>& pieces);

// WordPiece's (TextJoin::kWordPiece above), on its own.
std::string join_wordpiece_pieces(const std::vector<std::string>& pieces);
// One WordPiece token's text in that join: the first as it is, a later one with its space or
// without its "##", cleaned up.
std::string wordpiece_token_text(std::string_view token, bool first);

}  // namespace attnzoo::decoding
