// SentencePieceModel over libsentencepiece (sentencepiece_model.h). The file is read here, with
// a bound, and handed to the library as bytes.
#include <attnzoo/decoding/sentencepiece_model.h>

#include <sentencepiece_processor.h>

#include <filesystem>
#include <fstream>

namespace attnzoo::decoding {

SentencePieceModel::SentencePieceModel(const std::string& path)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()), path_(path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_regular_file(path, error)) throw UnitsError("no such file", path, 0);
  const auto size = fs::file_size(path, error);
  if (error) throw UnitsError("cannot read the file size", path, 0);
  if (size > static_cast<uintmax_t>(kMaxSentencePieceModelBytes)) {
    throw UnitsError("file too large: " + std::to_string(size) +
                         " bytes (a SentencePiece model is at most " +
                         std::to_string(kMaxSentencePieceModelBytes) + " bytes)",
                     path, 0);
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in || in.gcount() != static_cast<std::streamsize>(size)) {
    throw UnitsError("cannot read the file", path, 0);
  }
  const auto status = processor_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    throw UnitsError("not a SentencePiece model: " + std::string(status.message()), path, 0);
  }
}

SentencePieceModel::~SentencePieceModel() = default;
SentencePieceModel::SentencePieceModel(SentencePieceModel&&) noexcept = default;
SentencePieceModel& SentencePieceModel::operator=(SentencePieceModel&&) noexcept = default;

int64_t SentencePieceModel::size() const { return processor_->GetPieceSize(); }

std::string SentencePieceModel::piece(int64_t id) const {
  if (id < 0 || id >= size()) {
    throw DecodingError("piece id " + std::to_string(id) + " outside [0, " +
                        std::to_string(size()) + ") of " + path_);
  }
  return processor_->IdToPiece(static_cast<int>(id));
}

std::vector<std::string> SentencePieceModel::encode_pieces(const std::string& text) const {
  std::vector<std::string> pieces;
  const auto status = processor_->Encode(text, &pieces);
  if (!status.ok()) throw DecodingError(path_ + ": " + std::string(status.message()));
  return pieces;
}

std::string SentencePieceModel::decode_pieces(const std::vector<std::string>& pieces) const {
  std::string text;
  const auto status = processor_->Decode(pieces, &text);
  if (!status.ok()) throw DecodingError(path_ + ": " + std::string(status.message()));
  return text;
}

std::string SentencePieceModel::decode_ids(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= size()) {
      throw DecodingError("ids[" + std::to_string(i) + "]: piece id " + std::to_string(ids[i]) +
                          " outside [0, " + std::to_string(size()) + ") of " + path_);
    }
    narrow.push_back(static_cast<int>(ids[i]));
  }
  std::string text;
  const auto status = processor_->Decode(narrow, &text);
  if (!status.ok()) throw DecodingError(path_ + ": " + std::string(status.message()));
  return text;
}

}  // namespace attnzoo::decoding
