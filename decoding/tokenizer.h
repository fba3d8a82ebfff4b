// Text and CTC token ids of one model, both ways: its token table (units.h), how the table's
// tokens make text (TextJoin), and for SentencePiece tables the model that cut the pieces.
//
// encode (text -> ids), as the toolkits tokenize transcripts for training:
//   kCharacters    each UTF-8 character is a token; a run of white space between characters is
//                  one "▁" when the table has it (WeNet's character tables), else "<space>"
//                  (ESPnet's), else nothing (tables of Chinese characters have no space).
//   kWords         each white-space-separated word is a token.
//   kSentencePiece the model's pieces (SentencePieceModel::encode_pieces); a table alone cannot
//                  cut text into pieces, so encoding without the model is a DecodingError.
//   kWordPiece     BERT's WordPiece on the table: the text split at white space and around each
//                  ASCII punctuation mark, each word the longest tokens of the table from its
//                  start, the ones after the first as "##" continuations; a word no tokens cover,
//                  or longer than 100 bytes, is [UNK] (BERT's rule, without its lowercasing and
//                  accent stripping: the table's case is the text's).
// White space at either end is dropped. A character, word or piece the table does not hold
// becomes <unk> when the table has one, else a DecodingError naming it and where the text came
// from; so do <blank> and <sos/eos> written in the text, which are no text's tokens.
//
// decode (ids -> text): kWords, kSentencePiece and kWordPiece as Units::text (with a SentencePiece
// model, its own decoding of the pieces); kCharacters concatenates and turns "▁" and "<space>"
// back into spaces.
#pragma once

#include <attnzoo/decoding/sentencepiece_model.h>
#include <attnzoo/decoding/units.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnzoo::decoding {

class Tokenizer {
 public:
  Tokenizer(Units units, TextJoin join,
            std::shared_ptr<const SentencePieceModel> sentencepiece = nullptr);

  // `where` names the text's origin in errors ("train.txt:12").
  std::vector<int64_t> encode(std::string_view text, const std::string& where = "") const;
  std::string decode(const std::vector<int64_t>& ids) const;
  // Each id's own text, for per-token results: its token; a space token as " "; a SentencePiece
  // piece with each "▁" as a space (" hello" starts a word), so that the texts of a sequence's
  // tokens, concatenated and trimmed, are its text as join_sentencepiece_pieces gives it; a
  // WordPiece token as it follows another (wordpiece_token_text: " hello", "##ing" -> "ing", "."),
  // which is the text's but for a first token that is a continuation (the text keeps its "##").
  std::string token_text(int64_t id) const;

  const Units& units() const { return units_; }
  TextJoin join() const { return join_; }

 private:
  int64_t id_of(const std::string& token, const std::string& where) const;
  // One word's WordPiece tokens (kWordPiece).
  std::vector<int64_t> encode_wordpiece(std::string_view word, const std::string& where) const;

  Units units_;
  TextJoin join_;
  std::shared_ptr<const SentencePieceModel> sentencepiece_;
  int64_t space_id_ = -1;  // kCharacters: the id of "▁" or "<space>", else -1
};

}  // namespace attnzoo::decoding
