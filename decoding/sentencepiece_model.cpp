// SentencePieceModel over libsentencepiece, loaded through the module libattnzoo_sentencepiece
// (sentencepiece_model.h, sentencepiece_plugin.h). The file is read here, with a bound, and
// handed to the library as bytes.
#include <attnzoo/decoding/sentencepiece_model.h>

#include "sentencepiece_plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

namespace attnzoo::decoding {
namespace {

constexpr const char* kModuleName = "libattnzoo_sentencepiece.so";

AttnzooSpSink string_sink(std::string* out) {
  return {out, [](void* context, const char* data, size_t size) {
            static_cast<std::string*>(context)->append(data, size);
          }};
}

AttnzooSpSink pieces_sink(std::vector<std::string>* out) {
  return {out, [](void* context, const char* data, size_t size) {
            static_cast<std::vector<std::string>*>(context)->emplace_back(data, size);
          }};
}

// Where the module may be: ATTNZOO_SENTENCEPIECE_PLUGIN alone when it is set; else beside the
// file that holds this code (the shared library, or a static build's executable), then in
// ../lib from there.
std::vector<std::string> module_candidates() {
  if (const char* named = std::getenv("ATTNZOO_SENTENCEPIECE_PLUGIN"); named && *named) {
    return {named};
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_candidates), &info) == 0 || !info.dli_fname) {
    return {kModuleName};  // the loader's own search path
  }
  const auto dir = std::filesystem::path(info.dli_fname).parent_path();
  return {(dir / kModuleName).string(), (dir / ".." / "lib" / kModuleName).string()};
}

// The module's functions, loaded on first use and kept for the life of the process; a failure
// is reported on every call, naming each path tried.
const AttnzooSpApi& plugin() {
  static std::mutex mutex;
  static const AttnzooSpApi* api = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (api) return *api;
  int flags = RTLD_NOW | RTLD_LOCAL;
#if ATTNZOO_SP_DEEPBIND
  flags |= RTLD_DEEPBIND;
#endif
  std::string tried;
  for (const auto& path : module_candidates()) {
    void* handle = dlopen(path.c_str(), flags);
    if (!handle) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why ? why : "not loaded");
      continue;
    }
    const auto get = reinterpret_cast<AttnzooSpGetApi>(dlsym(handle, "attnzoo_sentencepiece_api"));
    const AttnzooSpApi* found = get ? get(ATTNZOO_SP_API_VERSION) : nullptr;
    if (!found) {
      tried += "\n  " + path + ": not a libattnzoo_sentencepiece of interface version " +
               std::to_string(ATTNZOO_SP_API_VERSION);
      dlclose(handle);
      continue;
    }
    api = found;  // the handle stays open: the functions are used until the process ends
    return *api;
  }
  throw DecodingError(
      "SentencePiece models need the module libattnzoo_sentencepiece, which could not be "
      "loaded (set ATTNZOO_SENTENCEPIECE_PLUGIN to its path):" +
      tried);
}

}  // namespace

struct SentencePieceModel::Processor {
  const AttnzooSpApi* api = nullptr;
  void* handle = nullptr;
  ~Processor() {
    if (handle) api->free(handle);
  }
};

SentencePieceModel::SentencePieceModel(const std::string& path) : path_(path) {
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
  *this = SentencePieceModel(FromBytes{}, bytes, path);
}

SentencePieceModel SentencePieceModel::from_bytes(const std::string& bytes,
                                                  const std::string& name) {
  return SentencePieceModel(FromBytes{}, bytes, name);
}

SentencePieceModel::SentencePieceModel(FromBytes, const std::string& bytes, const std::string& name)
    : path_(name) {
  if (bytes.size() > static_cast<uint64_t>(kMaxSentencePieceModelBytes)) {
    throw UnitsError("too large: " + std::to_string(bytes.size()) +
                         " bytes (a SentencePiece model is at most " +
                         std::to_string(kMaxSentencePieceModelBytes) + " bytes)",
                     name, 0);
  }
  processor_ = std::make_unique<Processor>();
  processor_->api = &plugin();
  std::string why;
  processor_->handle = processor_->api->load(bytes.data(), bytes.size(), string_sink(&why));
  if (!processor_->handle) throw UnitsError("not a SentencePiece model: " + why, name, 0);
}

SentencePieceModel::~SentencePieceModel() = default;
SentencePieceModel::SentencePieceModel(SentencePieceModel&&) noexcept = default;
SentencePieceModel& SentencePieceModel::operator=(SentencePieceModel&&) noexcept = default;

int64_t SentencePieceModel::size() const { return processor_->api->size(processor_->handle); }

std::string SentencePieceModel::piece(int64_t id) const {
  if (id < 0 || id >= size()) {
    throw DecodingError("piece id " + std::to_string(id) + " outside [0, " +
                        std::to_string(size()) + ") of " + path_);
  }
  std::string piece, why;
  if (processor_->api->id_to_piece(processor_->handle, static_cast<int>(id), string_sink(&piece),
                                   string_sink(&why))) {
    throw DecodingError(path_ + ": " + why);
  }
  return piece;
}

std::vector<std::string> SentencePieceModel::encode_pieces(const std::string& text) const {
  std::vector<std::string> pieces;
  std::string why;
  if (processor_->api->encode(processor_->handle, text.data(), text.size(), pieces_sink(&pieces),
                              string_sink(&why))) {
    throw DecodingError(path_ + ": " + why);
  }
  return pieces;
}

std::string SentencePieceModel::decode_pieces(const std::vector<std::string>& pieces) const {
  std::vector<const char*> data;
  std::vector<size_t> sizes;
  data.reserve(pieces.size());
  sizes.reserve(pieces.size());
  for (const auto& p : pieces) {
    data.push_back(p.data());
    sizes.push_back(p.size());
  }
  std::string text, why;
  if (processor_->api->decode_pieces(processor_->handle, data.data(), sizes.data(), pieces.size(),
                                     string_sink(&text), string_sink(&why))) {
    throw DecodingError(path_ + ": " + why);
  }
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
  std::string text, why;
  if (processor_->api->decode_ids(processor_->handle, narrow.data(), narrow.size(),
                                  string_sink(&text), string_sink(&why))) {
    throw DecodingError(path_ + ": " + why);
  }
  return text;
}

}  // namespace attnzoo::decoding
