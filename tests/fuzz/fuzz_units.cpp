// libFuzzer target: the token table parsers (WeNet units.txt, ESPnet token lists) on arbitrary
// bytes, with the CTC head size taken from the first byte. Whatever they accept must be a
// consistent table (every id 0 .. size-1 has a token that maps back to it, a <blank>, the size
// asked for) whose text can be made; whatever they refuse must be a UnitsError naming the source.
#include <attnzoo/decoding/units.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

void check(const attnzoo::decoding::Units& units, int64_t ctc_vocab) {
  if (units.size() < 1 || (ctc_vocab > 0 && units.size() != ctc_vocab)) __builtin_trap();
  if (units.blank_id() < 0 || units.token(units.blank_id()) != "<blank>") __builtin_trap();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < units.size(); ++i) {
    if (units.id(units.token(i)) != i) __builtin_trap();
    ids.push_back(i);
  }
  (void)units.text(ids, attnzoo::decoding::TextJoin::kCharacters);
  (void)units.text(ids, attnzoo::decoding::TextJoin::kSentencePiece);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnzoo::decoding;
  if (size == 0) return 0;
  const int64_t ctc_vocab = data[0] % 16;  // 0: any size
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  for (const bool espnet : {false, true}) {
    try {
      const auto units = espnet ? Units::parse_espnet(text, "fuzz", ctc_vocab)
                                : Units::parse_wenet(text, "fuzz", ctc_vocab);
      check(units, ctc_vocab);
    } catch (const UnitsError& e) {
      if (e.file() != "fuzz" || std::string_view(e.what()).substr(0, 4) != "fuzz") __builtin_trap();
    }
  }
  return 0;
}
