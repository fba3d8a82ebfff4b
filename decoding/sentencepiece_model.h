// A SentencePiece model (.model, the bpe.model / tokenizer model WeNet and ESPnet ship beside
// their token lists), through libsentencepiece: the pieces of its vocabulary and its own decoding
// of pieces to text (byte fallback, its normaliser's options and unknown pieces as the model
// says, which join_sentencepiece_pieces in units.h does not know).
//
// libsentencepiece is loaded when the first model is, from the module libattnzoo_sentencepiece
// (sentencepiece_plugin.h says why): beside the library that holds this class, else in ../lib
// from it (a static build's executable in bin/), or where ATTNZOO_SENTENCEPIECE_PLUGIN names.
//
// A CTC head's ids are not the model's ids (ESPnet's token list puts <blank> first and <sos/eos>
// last around the pieces): decode a hypothesis as model.decode_pieces(units.pieces(ids)).
#pragma once

#include <attnzoo/decoding/error.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnzoo::decoding {

inline constexpr int64_t kMaxSentencePieceModelBytes = 64 << 20;

class SentencePieceModel {
 public:
  // UnitsError naming the file: missing, larger than kMaxSentencePieceModelBytes, or not a model;
  // DecodingError naming the module's paths when libattnzoo_sentencepiece cannot be loaded.
  explicit SentencePieceModel(const std::string& path);
  // The model of a .model file's bytes (a file inside an archive); `name` stands for the file in
  // messages. UnitsError naming it when the bytes are not a model or are too many.
  static SentencePieceModel from_bytes(const std::string& bytes, const std::string& name);
  ~SentencePieceModel();
  SentencePieceModel(SentencePieceModel&&) noexcept;
  SentencePieceModel& operator=(SentencePieceModel&&) noexcept;

  int64_t size() const;
  // DecodingError when id is outside [0, size()).
  std::string piece(int64_t id) const;
  // The model's segmentation of `text` into pieces (its normaliser first, as it was trained).
  std::vector<std::string> encode_pieces(const std::string& text) const;
  std::string decode_pieces(const std::vector<std::string>& pieces) const;
  std::string decode_ids(const std::vector<int64_t>& ids) const;

 private:
  struct FromBytes {};
  SentencePieceModel(FromBytes, const std::string& bytes, const std::string& name);

  struct Processor;
  std::unique_ptr<Processor> processor_;
  std::string path_;
};

}  // namespace attnzoo::decoding
