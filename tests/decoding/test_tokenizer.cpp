// Tokenizer, text to CTC ids and back: on the tables and texts of tokenizer_cases.json
// (tests/decoding/make_reference.py: WeNet's characters with "▁", ESPnet's with "<space>", Chinese
// characters without a space, words, and a SentencePiece BPE model whose ids are sentencepiece's
// own encoding mapped to its ESPnet token list) the same ids and the same text back; round trips;
// unknown tokens as <unk> or a DecodingError naming the text's origin and the token; white space
// at the ends and in runs; malformed UTF-8 never read past the end of the text.
#include <attnzoo/decoding/tokenizer.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnzoo::decoding {
namespace test_tokenizer {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;
using Ids = std::vector<int64_t>;

const std::string kUnitsDir = std::string(ATTNZOO_DECODING_REFERENCE_DIR) + "/units";
const std::string kSpacePiece = "\xE2\x96\x81";  // "▁"

json load() {
  std::ifstream in(kUnitsDir + "/tokenizer_cases.json");
  EXPECT_TRUE(in) << "tokenizer_cases.json missing: run ctest (decoding.make_reference writes it)";
  return json::parse(in);
}

TextJoin join_named(const std::string& name) {
  for (const auto join : {TextJoin::kCharacters, TextJoin::kWords, TextJoin::kSentencePiece}) {
    if (name == to_string(join)) return join;
  }
  ADD_FAILURE() << "no TextJoin named " << name;
  return TextJoin::kCharacters;
}

UnitsFormat format_named(const std::string& name) {
  for (const auto format : {UnitsFormat::kWenet, UnitsFormat::kEspnet}) {
    if (name == to_string(format)) return format;
  }
  ADD_FAILURE() << "no UnitsFormat named " << name;
  return UnitsFormat::kWenet;
}

Tokenizer tokenizer_of(const json& table) {
  auto units = Units::read(kUnitsDir + "/" + table.at("file").get<std::string>(),
                           format_named(table.at("layout").get<std::string>()),
                           table.at("size").get<int64_t>());
  std::shared_ptr<const SentencePieceModel> model;
  if (table.contains("model")) {
    model = std::make_shared<const SentencePieceModel>(kUnitsDir + "/" +
                                                       table.at("model").get<std::string>());
  }
  return Tokenizer(std::move(units), join_named(table.at("join").get<std::string>()), model);
}

std::string error_of(const Tokenizer& tokenizer, std::string_view text, const std::string& where) {
  try {
    tokenizer.encode(text, where);
  } catch (const DecodingError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tokenizer, EncodesAndDecodesAsTheReference) {
  const auto tables = load();
  ASSERT_EQ(tables.size(), 5u);
  int cases = 0, unknown = 0, round_trips = 0;
  for (const auto& [name, table] : tables.items()) {
    const auto tokenizer = tokenizer_of(table);
    EXPECT_EQ(to_string(tokenizer.join()), table.at("join").get<std::string>());
    const auto& units = tokenizer.units();
    for (const auto& c : table.at("cases")) {
      const auto text = c.at("text").get<std::string>();
      const auto want = c.at("ids").get<Ids>();
      const std::string where = name + ": '" + text + "'";
      const auto ids = tokenizer.encode(text, "case");
      EXPECT_EQ(ids, want) << where;
      for (const auto id : ids) {
        EXPECT_NE(id, units.blank_id()) << where;
        EXPECT_NE(id, units.sos_eos_id()) << where;
      }
      const auto decoded = c.at("decoded").get<std::string>();
      EXPECT_EQ(tokenizer.decode(want), decoded) << where;
      // Each token's own text: for characters and words, they make the whole text; for a
      // SentencePiece table, each "▁" a space (word starts kept), so that they make the join of
      // the pieces once trimmed.
      std::string by_token;
      for (size_t i = 0; i < want.size(); ++i) {
        if (tokenizer.join() == TextJoin::kWords && i > 0) by_token += " ";
        by_token += tokenizer.token_text(want[i]);
      }
      if (tokenizer.join() == TextJoin::kSentencePiece) {
        // The pieces' texts, concatenated and trimmed: the join of the pieces (word starts kept).
        std::vector<std::string> pieces;
        for (const auto id : want) pieces.push_back(units.token(id));
        const auto first = by_token.find_first_not_of(' ');
        const auto last = by_token.find_last_not_of(' ');
        EXPECT_EQ(first == std::string::npos ? "" : by_token.substr(first, last - first + 1),
                  join_sentencepiece_pieces(pieces))
            << where;
      } else {
        EXPECT_EQ(by_token, decoded) << where;
      }
      ++cases;
      if (c.at("unknown").get<bool>()) {
        ++unknown;
        EXPECT_THAT(ids, ::testing::Contains(units.unk_id())) << where;
      } else {
        // Text without unknown tokens comes back as its normalised self, and encodes again to
        // the same ids.
        EXPECT_EQ(tokenizer.encode(tokenizer.decode(ids)), ids) << where;
        ++round_trips;
      }
    }
  }
  EXPECT_GT(cases, 150);
  EXPECT_GT(unknown, 40);
  EXPECT_GT(round_trips, 90);
}

// A table without <unk> refuses what it lacks, naming where the text came from and the token.
TEST(Tokenizer, UnknownTokens) {
  const auto espnet = Units::parse_espnet("<blank>\na\nb\n<space>\n<sos/eos>\n", "chars.txt");
  const Tokenizer chars(espnet, TextJoin::kCharacters);
  EXPECT_EQ(chars.encode(" ab  a "), (Ids{1, 2, 3, 1}));
  std::string message = error_of(chars, "ab c", "train.txt:12");
  EXPECT_THAT(message, StartsWith("train.txt:12: "));
  EXPECT_THAT(message, HasSubstr("'c'"));
  EXPECT_THAT(message, HasSubstr("chars.txt"));
  EXPECT_THAT(error_of(chars, "a你", ""), StartsWith("'你' is not a token of chars.txt"));
  // The blank and <sos/eos> are no transcript's tokens.
  EXPECT_THAT(error_of(chars, "<blank>", "x"), HasSubstr("'<'"));
  const Tokenizer words(Units::parse_wenet("<blank> 0\nthe 1\nfox 2\n<sos/eos> 3\n", "words.txt"),
                        TextJoin::kWords);
  EXPECT_EQ(words.encode("the fox the"), (Ids{1, 2, 1}));
  message = error_of(words, "the quick fox", "dev.tsv:3");
  EXPECT_THAT(message, StartsWith("dev.tsv:3: 'quick' is not a token of words.txt"));
  EXPECT_THAT(error_of(words, "the <blank>", "a"), HasSubstr("'<blank>'"));
  EXPECT_THAT(error_of(words, "<sos/eos>", "a"), HasSubstr("'<sos/eos>'"));

  // With <unk>, all of these are <unk>.
  const Tokenizer with_unk(
      Units::parse_wenet("<blank> 0\n<unk> 1\nthe 2\nfox 3\n<sos/eos> 4\n", "w.txt"),
      TextJoin::kWords);
  EXPECT_EQ(with_unk.encode("the quick <blank> fox <sos/eos>"), (Ids{2, 1, 1, 3, 1}));
  EXPECT_EQ(with_unk.decode({2, 1, 0, 3, 4}), "the <unk> fox");
}

TEST(Tokenizer, WordPieceTakesTheLongestTokensOfEachWord) {
  // BERT's rule: the longest token from each word's start, the rest as "##" continuations; each
  // ASCII punctuation mark a word of its own; a word no tokens cover is [UNK] (tested against
  // NeMo's own tokenizer in tests/api/test_nemo_file.cpp).
  const auto units = Units::parse_espnet(
      "<blank>\n[UNK]\nthe\nquick\nq\n##u\n##i\n##ck\n##ly\n.\nfox\n", "vocab.txt");
  const Tokenizer tokenizer(units, TextJoin::kWordPiece);
  EXPECT_EQ(tokenizer.encode("the quickly fox."), (Ids{2, 3, 8, 10, 9}));
  EXPECT_EQ(tokenizer.encode("qu the.fox"), (Ids{4, 5, 2, 9, 10}));
  EXPECT_EQ(tokenizer.encode("quack fox"), (Ids{1, 10}));  // no "##a": the whole word is [UNK]
  EXPECT_EQ(tokenizer.encode(std::string(101, 'q') + " fox"), (Ids{1, 10}));  // over 100 bytes
  EXPECT_EQ(tokenizer.decode({2, 3, 8, 9, 1, 0, 10}), "the quickly. [UNK] fox");
  EXPECT_EQ(tokenizer.decode({5, 2}), "##u the");  // a first continuation keeps its "##"
  EXPECT_EQ(tokenizer.token_text(8), "ly");
  EXPECT_EQ(tokenizer.token_text(10), " fox");
  EXPECT_EQ(tokenizer.token_text(9), ".");
  // Without [UNK], a word it cannot cover is an error naming it and the table.
  const Tokenizer strict(Units::parse_espnet("<blank>\nthe\n", "small.txt"), TextJoin::kWordPiece);
  EXPECT_THAT(error_of(strict, "the cat", "train.txt:2"),
              StartsWith("train.txt:2: 'cat' is not made of tokens of small.txt, which has no "
                         "[UNK]"));
}

TEST(Tokenizer, SentencePieceNeedsItsModel) {
  const auto units = Units::read_espnet(kUnitsDir + "/bpe_tokens.txt");
  const Tokenizer tokenizer(units, TextJoin::kSentencePiece);
  const auto message = error_of(tokenizer, "the fox", "train.txt:7");
  EXPECT_THAT(message, StartsWith("train.txt:7: "));
  EXPECT_THAT(message, HasSubstr("bpe_tokens.txt"));
  EXPECT_THAT(message, HasSubstr(".model"));
  // Decoding needs no model: Units::text's join of the pieces.
  const auto model = std::make_shared<const SentencePieceModel>(kUnitsDir + "/bpe.model");
  const Tokenizer with_model(units, TextJoin::kSentencePiece, model);
  const auto ids = with_model.encode("  the   quick fox ");
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(with_model.decode(ids), "the quick fox");
  EXPECT_EQ(tokenizer.decode(ids), "the quick fox");
  EXPECT_EQ(tokenizer.decode(ids), units.text(ids, TextJoin::kSentencePiece));
  EXPECT_TRUE(with_model.encode(" \t ").empty());
}

TEST(Tokenizer, WhiteSpace) {
  const auto wenet = Units::parse_wenet(
      "<blank> 0\n<unk> 1\n" + kSpacePiece + " 2\na 3\nb 4\n\xE4\xBD\xA0 5\n<sos/eos> 6\n",
      "u.txt");
  const Tokenizer chars(wenet, TextJoin::kCharacters);
  // Ends dropped; a run of spaces, tabs and newlines is one "▁".
  EXPECT_EQ(chars.encode("  a \t\n b  "), (Ids{3, 2, 4}));
  EXPECT_EQ(chars.encode("ab"), (Ids{3, 4}));
  EXPECT_EQ(chars.encode("a b"), (Ids{3, 2, 4}));
  EXPECT_TRUE(chars.encode("").empty());
  EXPECT_TRUE(chars.encode(" \t\r\n\v\f ").empty());
  EXPECT_EQ(chars.token_text(2), " ");
  EXPECT_EQ(chars.token_text(3), "a");
  // Space tokens decode to spaces, the ends trimmed; "▁" is not written as itself.
  EXPECT_EQ(chars.decode({2, 3, 2, 2, 4, 2}), "a  b");
  EXPECT_EQ(chars.decode({0, 3, 0, 2, 0, 4, 6}), "a b");

  const auto espnet = Units::parse_espnet("<blank>\n<unk>\n<space>\na\nb\n", "t.txt");
  const Tokenizer espnet_chars(espnet, TextJoin::kCharacters);
  EXPECT_EQ(espnet_chars.encode(" a   b "), (Ids{3, 2, 4}));
  EXPECT_EQ(espnet_chars.decode({3, 2, 4}), "a b");
  EXPECT_EQ(espnet_chars.token_text(2), " ");

  // A table without a space token: white space only separates (Chinese characters).
  const auto chinese = Units::parse_wenet("<blank> 0\n<unk> 1\n你 2\n好 3\n", "zh.txt");
  const Tokenizer zh(chinese, TextJoin::kCharacters);
  EXPECT_EQ(zh.encode(" 你 好  你好 "), (Ids{2, 3, 2, 3}));
  EXPECT_EQ(zh.decode({2, 3, 2, 3}), "你好你好");

  const auto words_table = Units::parse_wenet("<blank> 0\n<unk> 1\na 2\nbb 3\n", "w.txt");
  const Tokenizer words(words_table, TextJoin::kWords);
  EXPECT_EQ(words.encode("\ta   bb\n a "), (Ids{2, 3, 2}));
  EXPECT_EQ(words.decode({2, 3, 2}), "a bb a");
  EXPECT_TRUE(words.encode("   ").empty());
}

// A UTF-8 sequence cut by the end of the text is one character of what is there: the bytes after
// the end (here the rest of "你", a token of the table) are never read.
TEST(Tokenizer, MalformedUtf8StaysInsideTheText) {
  const auto units = Units::parse_wenet(
      "<blank> 0\n<unk> 1\na 2\nb 3\n\xE4\xBD\xA0 4\n\xF0\x9F\x99\x82 5\n", "u.txt");
  const Tokenizer tokenizer(units, TextJoin::kCharacters);
  const std::string buffer = "ab\xE4\xBD\xA0";
  EXPECT_EQ(tokenizer.encode(buffer), (Ids{2, 3, 4}));
  EXPECT_EQ(tokenizer.encode(std::string_view(buffer.data(), 3)), (Ids{2, 3, 1}));
  EXPECT_EQ(tokenizer.encode(std::string_view(buffer.data(), 4)), (Ids{2, 3, 1}));
  const std::string smile = "a\xF0\x9F\x99\x82";
  EXPECT_EQ(tokenizer.encode(smile), (Ids{2, 5}));
  EXPECT_EQ(tokenizer.encode(std::string_view(smile.data(), 2)), (Ids{2, 1}));
  EXPECT_EQ(tokenizer.encode(std::string_view(smile.data(), 4)), (Ids{2, 1}));
  // Stray bytes: a continuation byte without a lead, an invalid lead; each its own character.
  EXPECT_EQ(tokenizer.encode("\x80"
                             "a\xFF"
                             "b"),
            (Ids{1, 2, 1, 3}));

  const auto no_unk = Units::parse_wenet("<blank> 0\na 1\nb 2\n\xE4\xBD\xA0 3\n", "u.txt");
  const Tokenizer strict(no_unk, TextJoin::kCharacters);
  const auto message = error_of(strict, std::string_view(buffer.data(), 3), "cut.txt:1");
  EXPECT_THAT(message, StartsWith("cut.txt:1: '\xE4' is not a token of u.txt"));
}

}  // namespace test_tokenizer
}  // namespace attnzoo::decoding
