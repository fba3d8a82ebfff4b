// Reading WeNet and ESPnet token tables (units.h). The files come from strangers (a model
// download), so every byte is checked before use, and sizes are bounded before anything is
// allocated for them (tests/fuzz/fuzz_units.cpp).
#include <attnzoo/decoding/units.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

namespace attnzoo::decoding {
namespace {

const std::string kBlank = "<blank>";
const std::string kUnk = "<unk>";
const std::string kSosEos = "<sos/eos>";
const std::string kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's space

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'; }

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF)
// without control characters.
bool is_clean_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t code = 0;
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t j = 1; j <= n; ++j) {
      const auto d = static_cast<unsigned char>(s[i + j]);
      if ((d & 0xc0) != 0x80) return false;
      code = (code << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[n] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// The lines of a file's bytes: "\n" ends a line, a "\r" before it is dropped, a final "\n" ends
// the last line rather than starting an empty one. Bounds the file and each line.
std::vector<std::string_view> lines_of(std::string_view text, const std::string& source) {
  if (static_cast<int64_t>(text.size()) > kMaxUnitsFileBytes) {
    throw UnitsError("file too large: " + std::to_string(text.size()) +
                         " bytes (a token table is at most " + std::to_string(kMaxUnitsFileBytes) +
                         " bytes)",
                     source, 0);
  }
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (static_cast<int64_t>(line.size()) > kMaxUnitsLineBytes) {
      throw UnitsError("line too long: " + std::to_string(line.size()) + " bytes (at most " +
                           std::to_string(kMaxUnitsLineBytes) + ")",
                       source, static_cast<int64_t>(lines.size()) + 1);
    }
    lines.push_back(line);
    begin = end + 1;
  }
  if (lines.empty()) throw UnitsError("empty file: no tokens", source, 0);
  return lines;
}

// The whitespace-separated fields of a line.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const size_t begin = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > begin) fields.push_back(line.substr(begin, i - begin));
  }
  return fields;
}

std::string quoted(std::string_view s) {
  std::string out = "'";
  for (const char c : s.substr(0, 64)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + (s.size() > 64 ? "...'" : "'");
}

void check_token(std::string_view token, const std::string& source, int64_t line) {
  if (!is_clean_utf8(token)) {
    throw UnitsError("token " + quoted(token) + " is not UTF-8 text", source, line);
  }
}

std::string read_bounded_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_regular_file(path, error)) throw UnitsError("no such file", path, 0);
  const auto size = fs::file_size(path, error);
  if (error) throw UnitsError("cannot read the file size", path, 0);
  const auto limit = " (a token table is at most " + std::to_string(kMaxUnitsFileBytes) + " bytes)";
  if (size > static_cast<uintmax_t>(kMaxUnitsFileBytes)) {
    throw UnitsError("file too large: " + std::to_string(size) + " bytes" + limit, path, 0);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UnitsError("cannot open the file", path, 0);
  // One byte more than the limit: a file that grew since its size was read is caught too.
  std::string text(static_cast<size_t>(kMaxUnitsFileBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad() || !in.eof()) {
    throw UnitsError(in.bad() ? std::string("cannot read the file") : "file too large" + limit,
                     path, 0);
  }
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace

Units::Units(std::vector<std::string> tokens, std::string source, int64_t ctc_vocab)
    : tokens_(std::move(tokens)), source_(std::move(source)) {
  for (size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<int64_t>(i));
  blank_id_ = id(kBlank);
  unk_id_ = id(kUnk);
  sos_eos_id_ = id(kSosEos);
  if (blank_id_ < 0) throw UnitsError("no <blank> token (CTC needs one)", source_, 0);
  if (ctc_vocab > 0 && size() != ctc_vocab) {
    throw UnitsError(std::to_string(size()) + " tokens, but the CTC head has " +
                         std::to_string(ctc_vocab) + " outputs",
                     source_, 0);
  }
}

Units Units::parse_wenet(std::string_view text, const std::string& source, int64_t ctc_vocab) {
  const auto lines = lines_of(text, source);
  const auto count = static_cast<int64_t>(lines.size());
  std::vector<std::string> tokens(lines.size());
  std::vector<int64_t> line_of_id(lines.size(), 0);
  std::unordered_map<std::string_view, int64_t> line_of_token;
  for (int64_t n = 1; n <= count; ++n) {
    const auto fields = fields_of(lines[static_cast<size_t>(n - 1)]);
    if (fields.size() != 2) {
      throw UnitsError("expected 'TOKEN ID', got " + std::to_string(fields.size()) + " fields in " +
                           quoted(lines[static_cast<size_t>(n - 1)]),
                       source, n);
    }
    const std::string_view token = fields[0], id_text = fields[1];
    check_token(token, source, n);
    const bool digits = !id_text.empty() && std::all_of(id_text.begin(), id_text.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits) {
      throw UnitsError("id " + quoted(id_text) + " of " + quoted(token) + " is not a number",
                       source, n);
    }
    // 18 digits cannot overflow int64_t; a longer id is past any table that fits in memory.
    int64_t id = std::numeric_limits<int64_t>::max();
    if (id_text.size() <= 18) {
      id = 0;
      for (const char c : id_text) id = id * 10 + (c - '0');
    }
    if (id >= count) {
      const std::string shown =
          id_text.size() <= 24 ? std::string(id_text) : std::string(id_text.substr(0, 24)) + "...";
      throw UnitsError("id " + shown + " of " + quoted(token) + " is past the table's size (" +
                           std::to_string(count) + " tokens: ids 0 .. " +
                           std::to_string(count - 1) + ")",
                       source, n);
    }
    if (line_of_id[static_cast<size_t>(id)] > 0) {
      throw UnitsError("duplicate id " + std::to_string(id) + " (line " +
                           std::to_string(line_of_id[static_cast<size_t>(id)]) + " has it too)",
                       source, n);
    }
    const auto [seen, inserted] = line_of_token.emplace(token, n);
    if (!inserted) {
      throw UnitsError("duplicate token " + quoted(token) + " (line " +
                           std::to_string(seen->second) + " has it too)",
                       source, n);
    }
    line_of_id[static_cast<size_t>(id)] = n;
    tokens[static_cast<size_t>(id)] = std::string(token);
  }
  return Units(std::move(tokens), source, ctc_vocab);
}

Units Units::parse_espnet(std::string_view text, const std::string& source, int64_t ctc_vocab) {
  const auto lines = lines_of(text, source);
  std::vector<std::string> tokens;
  tokens.reserve(lines.size());
  std::unordered_map<std::string_view, int64_t> line_of_token;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto n = static_cast<int64_t>(i) + 1;
    const auto fields = fields_of(lines[i]);
    if (fields.size() != 1) {
      throw UnitsError("expected one token per line, got " + std::to_string(fields.size()) +
                           " fields in " + quoted(lines[i]),
                       source, n);
    }
    check_token(fields[0], source, n);
    const auto [seen, inserted] = line_of_token.emplace(fields[0], n);
    if (!inserted) {
      throw UnitsError("duplicate token " + quoted(fields[0]) + " (line " +
                           std::to_string(seen->second) + " has it too)",
                       source, n);
    }
    tokens.emplace_back(fields[0]);
  }
  return Units(std::move(tokens), source, ctc_vocab);
}

Units Units::read_wenet(const std::string& path, int64_t ctc_vocab) {
  return parse_wenet(read_bounded_file(path), path, ctc_vocab);
}

Units Units::read_espnet(const std::string& path, int64_t ctc_vocab) {
  return parse_espnet(read_bounded_file(path), path, ctc_vocab);
}

Units Units::read(const std::string& path, UnitsFormat format, int64_t ctc_vocab) {
  return format == UnitsFormat::kWenet ? read_wenet(path, ctc_vocab) : read_espnet(path, ctc_vocab);
}

const char* to_string(TextJoin join) {
  switch (join) {
    case TextJoin::kCharacters:
      return "characters";
    case TextJoin::kWords:
      return "words";
    case TextJoin::kSentencePiece:
      return "sentencepiece";
    case TextJoin::kWordPiece:
      return "wordpiece";
  }
  return "?";
}

const char* to_string(UnitsFormat format) {
  return format == UnitsFormat::kWenet ? "wenet" : "espnet";
}

const std::string& Units::token(int64_t id) const {
  if (id < 0 || id >= size()) {
    throw DecodingError("token id " + std::to_string(id) + " outside [0, " +
                        std::to_string(size()) + ") of " + source_);
  }
  return tokens_[static_cast<size_t>(id)];
}

int64_t Units::id(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

std::vector<std::string> Units::pieces(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= size()) {
      throw DecodingError("ids[" + std::to_string(i) + "]: token id " + std::to_string(id) +
                          " outside [0, " + std::to_string(size()) + ") of " + source_);
    }
    if (id == blank_id_ || id == sos_eos_id_) continue;
    out.push_back(tokens_[static_cast<size_t>(id)]);
  }
  return out;
}

std::string join_sentencepiece_pieces(const std::vector<std::string>& pieces) {
  std::string text;
  for (const auto& piece : pieces) {
    std::string_view rest = piece;
    if (text.empty() && rest.substr(0, kSpaceSymbol.size()) == kSpaceSymbol) {
      rest.remove_prefix(kSpaceSymbol.size());
    }
    for (size_t at; (at = rest.find(kSpaceSymbol)) != std::string_view::npos;) {
      text.append(rest.substr(0, at));
      text.push_back(' ');
      rest.remove_prefix(at + kSpaceSymbol.size());
    }
    text.append(rest);
  }
  return text;
}

std::string wordpiece_token_text(std::string_view token, bool first) {
  std::string text;
  if (first) {
    text = token;
  } else if (token.substr(0, 2) == "##") {
    text = token.substr(2);
  } else {
    text = " " + std::string(token);
  }
  // The clean-up of Hugging Face's WordPiece decoder, on each token's text in its order.
  for (const auto& [from, to] : {std::pair<std::string_view, std::string_view>{" .", "."},
                                 {" ?", "?"},
                                 {" !", "!"},
                                 {" ,", ","},
                                 {" ' ", "'"},
                                 {" n't", "n't"},
                                 {" 'm", "'m"},
                                 {" do not", " don't"},
                                 {" 's", "'s"},
                                 {" 've", "'ve"},
                                 {" 're", "'re"}}) {
    std::string out;
    size_t at = 0;
    for (size_t hit; (hit = text.find(from, at)) != std::string::npos; at = hit + from.size()) {
      out.append(text, at, hit - at);
      out.append(to);
    }
    out.append(text, at, std::string::npos);
    text = std::move(out);
  }
  return text;
}

std::string join_wordpiece_pieces(const std::vector<std::string>& pieces) {
  std::string text;
  for (size_t i = 0; i < pieces.size(); ++i) text += wordpiece_token_text(pieces[i], i == 0);
  return text;
}

std::string Units::text(const std::vector<int64_t>& ids, TextJoin join) const {
  const auto tokens = pieces(ids);
  if (join == TextJoin::kSentencePiece) return join_sentencepiece_pieces(tokens);
  if (join == TextJoin::kWordPiece) return join_wordpiece_pieces(tokens);
  std::string text;
  for (const auto& token : tokens) {
    if (join == TextJoin::kWords && !text.empty()) text += ' ';
    text += token;
  }
  return text;
}

}  // namespace attnzoo::decoding
