// libattnzoo_sentencepiece: libsentencepiece's SentencePieceProcessor behind the C interface of
// sentencepiece_plugin.h. Nothing here throws across the interface: the library reports through
// its Status, and an allocation failure is caught and reported as an error.
#include "sentencepiece_plugin.h"

#include <sentencepiece_processor.h>

#include <exception>
#include <string>
#include <vector>

namespace {

using Processor = sentencepiece::SentencePieceProcessor;

void give(AttnzooSpSink sink, const std::string& s) {
  sink.append(sink.context, s.data(), s.size());
}

// Runs `body` (returning a sentencepiece Status), turning a failed status or an exception into
// 1 and the message.
template <typename Body>
int guarded(AttnzooSpSink error, Body&& body) {
  try {
    const auto status = body();
    if (status.ok()) return 0;
    give(error, std::string(status.message()));
  } catch (const std::exception& e) {
    give(error, e.what());
  } catch (...) {
    give(error, "unknown error in libsentencepiece");
  }
  return 1;
}

const Processor& of(const void* processor) { return *static_cast<const Processor*>(processor); }

void* load(const char* bytes, size_t size, AttnzooSpSink error) {
  Processor* processor = nullptr;
  const int failed = guarded(error, [&] {
    processor = new Processor();
    return processor->LoadFromSerializedProto(std::string(bytes, size));
  });
  if (failed) {
    delete processor;
    return nullptr;
  }
  return processor;
}

void free_processor(void* processor) { delete static_cast<Processor*>(processor); }

int64_t size(const void* processor) { return of(processor).GetPieceSize(); }

int id_to_piece(const void* processor, int id, AttnzooSpSink out, AttnzooSpSink error) {
  return guarded(error, [&] {
    give(out, of(processor).IdToPiece(id));
    return sentencepiece::util::Status();
  });
}

int encode(const void* processor, const char* text, size_t size, AttnzooSpSink pieces,
           AttnzooSpSink error) {
  return guarded(error, [&] {
    std::vector<std::string> found;
    const auto status = of(processor).Encode(std::string(text, size), &found);
    if (status.ok()) {
      for (const auto& piece : found) give(pieces, piece);
    }
    return status;
  });
}

int decode_pieces(const void* processor, const char* const* pieces, const size_t* sizes,
                  size_t count, AttnzooSpSink out, AttnzooSpSink error) {
  return guarded(error, [&] {
    std::vector<std::string> given;
    given.reserve(count);
    for (size_t i = 0; i < count; ++i) given.emplace_back(pieces[i], sizes[i]);
    std::string text;
    const auto status = of(processor).Decode(given, &text);
    if (status.ok()) give(out, text);
    return status;
  });
}

int decode_ids(const void* processor, const int* ids, size_t count, AttnzooSpSink out,
               AttnzooSpSink error) {
  return guarded(error, [&] {
    std::string text;
    const auto status = of(processor).Decode(std::vector<int>(ids, ids + count), &text);
    if (status.ok()) give(out, text);
    return status;
  });
}

constexpr AttnzooSpApi kApi{load,   free_processor, size,      id_to_piece,
                            encode, decode_pieces,  decode_ids};

}  // namespace

extern "C" __attribute__((visibility("default"))) const AttnzooSpApi* attnzoo_sentencepiece_api(
    int version) {
  return version == ATTNZOO_SP_API_VERSION ? &kApi : nullptr;
}
