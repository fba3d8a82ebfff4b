// libFuzzer target: the token table parsers (WeNet units.txt, ESPnet token lists) on arbitrary
// bytes, with the CTC head size taken from the first byte. Whatever they accept must be a
// consistent table (every id 0 .. size-1 has a token that maps back to it, a <blank>, the size
// asked for) whose text can be made; whatever they refuse must be a UnitsError naming the source.
// The same bytes are also a transcript for the Tokenizer (decoding/tokenizer.h) of fixed character
// and word tables, as a training list's text is: every id it gives is a token of the table (never
// <blank> or <sos/eos>), its text round trip is stable, and an unknown token in a table without
// <unk> is a DecodingError naming where the text came from.
#include <attnzoo/decoding/tokenizer.h>
#include <attnzoo/decoding/units.h>

#include <algorithm>
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

// Tokenizes `text` with `tokenizer` and checks what it gives.
void check_tokenizer(const attnzoo::decoding::Tokenizer& tokenizer, std::string_view text) {
  using attnzoo::decoding::DecodingError;
  const auto& units = tokenizer.units();
  std::vector<int64_t> ids;
  try {
    ids = tokenizer.encode(text, "fuzz:1");
  } catch (const DecodingError& e) {
    if (units.unk_id() >= 0 || std::string_view(e.what()).substr(0, 7) != "fuzz:1:") {
      __builtin_trap();
    }
    return;
  }
  for (const int64_t id : ids) {
    if (id < 0 || id >= units.size() || id == units.blank_id() || id == units.sos_eos_id()) {
      __builtin_trap();
    }
    (void)tokenizer.token_text(id);
  }
  // Decoding and encoding again normalises (a literal "▁" at an end, white space runs) once, and
  // then gives the same ids: text -> ids -> text is stable. (<unk> decodes to text that is not
  // its own token.)
  if (std::find(ids.begin(), ids.end(), units.unk_id()) != ids.end()) return;
  const auto once = tokenizer.encode(tokenizer.decode(ids));
  if (tokenizer.encode(tokenizer.decode(once)) != once) __builtin_trap();
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
  // Characters (with a space token, and <unk>) and words (without <unk>: unknown words refused).
  static const Tokenizer characters(
      Units::parse_wenet(
          "<blank> 0\n<unk> 1\n\xE2\x96\x81 2\na 3\nb 4\n\xE4\xBD\xA0 5\n<sos/eos> 6\n", "chars"),
      TextJoin::kCharacters);
  static const Tokenizer words(
      Units::parse_wenet("<blank> 0\none 1\ntwo 2\n<sos/eos> 3\n", "words"), TextJoin::kWords);
  check_tokenizer(characters, text);
  check_tokenizer(words, text);
  return 0;
}
