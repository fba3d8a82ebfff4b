// Token tables: WeNet's units.txt and ESPnet's token list read as the toolkits write them, text
// as sentencepiece itself decodes it (the `sentencepiece` package, tests/decoding/
// make_reference.py), and every kind of bad file refused with its file and line.
#include <attnzoo/decoding/sentencepiece_model.h>
#include <attnzoo/decoding/units.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace attnzoo::decoding {
namespace test_units {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kUnitsDir = std::string(ATTNZOO_DECODING_REFERENCE_DIR) + "/units";

json cases() {
  std::ifstream in(kUnitsDir + "/units_cases.json");
  EXPECT_TRUE(in) << "run ctest (decoding.make_reference writes the references)";
  return json::parse(in);
}

std::vector<int64_t> ids_of(const json& j) { return j.at("ids").get<std::vector<int64_t>>(); }

TEST(Units, ReadsWenetUnitsInAnyLineOrder) {
  const auto want = cases().at("wenet");
  const auto size = want.at("size").get<int64_t>();
  const auto units = Units::read_wenet(kUnitsDir + "/units.txt", size);
  const auto tokens = want.at("tokens").get<std::vector<std::string>>();
  ASSERT_EQ(units.size(), size);
  for (int64_t i = 0; i < size; ++i) {
    EXPECT_EQ(units.token(i), tokens[static_cast<size_t>(i)]);
    EXPECT_EQ(units.id(tokens[static_cast<size_t>(i)]), i);
  }
  EXPECT_EQ(units.blank_id(), 0);
  EXPECT_EQ(units.unk_id(), 1);
  EXPECT_EQ(units.sos_eos_id(), size - 1);
  EXPECT_EQ(units.id("not a token"), -1);
  for (const auto& s : want.at("sequences")) {
    EXPECT_EQ(units.text(ids_of(s)), s.at("text").get<std::string>());
  }
}

TEST(Units, ReadsEspnetTokenListWithCrlf) {
  const auto want = cases().at("espnet");
  const auto units = Units::read_espnet(kUnitsDir + "/tokens.txt");
  const auto tokens = want.at("tokens").get<std::vector<std::string>>();
  ASSERT_EQ(units.size(), static_cast<int64_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(units.token(static_cast<int64_t>(i)), tokens[i]);
  EXPECT_EQ(units.blank_id(), 0);
  EXPECT_EQ(units.sos_eos_id(), units.size() - 1);
  EXPECT_EQ(units.text({2, 3, 10, 0, 4, 11}),
            "ab\xE2\x96\x81"
            "c");
  EXPECT_EQ(units.text({2, 3, 10, 0, 4, 11}, TextJoin::kSentencePiece), "ab c");
}

// The BPE model's pieces as ESPnet's token list holds them, decoded by our join, by the model
// through libsentencepiece, and by the model's own ids: all as the sentencepiece package does.
TEST(Units, SentencePieceTextMatchesSentencepiece) {
  const auto want = cases().at("sentencepiece");
  const auto units = Units::read_espnet(kUnitsDir + "/bpe_tokens.txt", want.at("size"));
  const SentencePieceModel model(kUnitsDir + "/bpe.model");
  ASSERT_EQ(model.size(), want.at("model_size").get<int64_t>());
  const auto pieces = want.at("pieces").get<std::vector<std::string>>();
  for (int64_t i = 0; i < model.size(); ++i)
    EXPECT_EQ(model.piece(i), pieces[static_cast<size_t>(i)]);
  int sentences = 0;
  for (const auto& s : want.at("sequences")) {
    const auto ids = ids_of(s);
    const auto text = s.at("text").get<std::string>();
    EXPECT_EQ(units.text(ids, TextJoin::kSentencePiece), text);
    EXPECT_EQ(model.decode_pieces(units.pieces(ids)), text);
    EXPECT_EQ(model.decode_ids(s.at("model_ids").get<std::vector<int64_t>>()), text);
    if (s.contains("sentence")) {
      ++sentences;
      // Encoding normalises whitespace (runs become one, the ends are trimmed); the words stay.
      std::string normalised;
      std::istringstream words(s.at("sentence").get<std::string>());
      for (std::string w; words >> w;) normalised += (normalised.empty() ? "" : " ") + w;
      EXPECT_EQ(text, normalised);
    }
  }
  EXPECT_GT(sentences, 10);
}

TEST(Units, JoinsSentencePiecePieces) {
  const std::string s = "\xE2\x96\x81";
  EXPECT_EQ(join_sentencepiece_pieces({}), "");
  EXPECT_EQ(join_sentencepiece_pieces({s + "he", "llo", s + "world"}), "hello world");
  EXPECT_EQ(join_sentencepiece_pieces({s, s + "a"}), "a");  // while nothing is written
  EXPECT_EQ(join_sentencepiece_pieces({"a", s, s + "b"}), "a  b");
}

TEST(Units, BadIdsAreDecodingErrors) {
  const auto units = Units::parse_espnet("<blank>\na\n", "mem");
  EXPECT_THROW(units.token(2), DecodingError);
  try {
    units.pieces({1, 0, 5});
    ADD_FAILURE();
  } catch (const DecodingError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ids[2]: token id 5 outside [0, 2) of mem"));
  }
}

class BadUnitsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("attnzoo_decoding_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& bytes) {
    const auto path = (dir_ / ("units_" + std::to_string(files_++) + ".txt")).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The error of reading `bytes` as WeNet units (or ESPnet tokens): it names the file and line.
  void expect_error(const std::string& bytes, int64_t line, const std::string& what,
                    bool espnet = false, int64_t ctc_vocab = 0) {
    const auto path = write(bytes);
    try {
      espnet ? Units::read_espnet(path, ctc_vocab) : Units::read_wenet(path, ctc_vocab);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const UnitsError& e) {
      EXPECT_EQ(e.file(), path);
      EXPECT_EQ(e.line(), line) << e.what();
      const auto prefix = line > 0 ? path + ":" + std::to_string(line) + ": " : path + ": ";
      EXPECT_THAT(e.what(), StartsWith(prefix));
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  }

  fs::path dir_;
  int files_ = 0;
};

TEST_F(BadUnitsFile, WenetCases) {
  expect_error("<blank> 0\na 1\nb 1\n", 3, "duplicate id 1 (line 2 has it too)");
  expect_error("<blank> 0\na 1\na 2\n", 3, "duplicate token 'a' (line 2 has it too)");
  expect_error("<blank> 0\na 5\n", 2, "id 5 of 'a' is past the table's size (2 tokens");
  expect_error("<blank> 0\na 1 extra\n", 2, "expected 'TOKEN ID', got 3 fields");
  expect_error("<blank> 0\na\n", 2, "expected 'TOKEN ID', got 1 fields");
  expect_error("<blank> 0\n\nb 1\n", 2, "expected 'TOKEN ID', got 0 fields");
  expect_error("<blank> 0\na -1\n", 2, "id '-1' of 'a' is not a number");
  expect_error("<blank> 0\na 1x\n", 2, "is not a number");
  expect_error("<blank> 0\na 99999999999999999999\n", 2,
               "id 99999999999999999999 of 'a' is past the table's size");
  expect_error("<blank> 0\na 1234567890123456789012345678\n", 2,
               "id 123456789012345678901234... of");
  expect_error("a 0\nb 1\n", 0, "no <blank> token");
  expect_error("<blank> 0\na 1\n", 0, "2 tokens, but the CTC head has 3 outputs", false, 3);
  expect_error("", 0, "empty file");
  expect_error("<blank> 0\n\xff\xfe 1\n", 2, "is not UTF-8 text");
  expect_error("<blank> 0\n\xC0\xAF 1\n", 2, "is not UTF-8 text");  // overlong "/"
  expect_error("<blank> 0\na\x01 1\n", 2, "'a\\x01' is not UTF-8 text");
  expect_error("<blank> 0\n" + std::string(2000, 'x') + " 1\n", 2, "line too long: 2002 bytes");
}

TEST_F(BadUnitsFile, EspnetCases) {
  expect_error("<blank>\na\nb\na\n", 4, "duplicate token 'a' (line 2 has it too)", true);
  expect_error("<blank>\na b\n", 2, "expected one token per line, got 2 fields", true);
  expect_error("<blank>\n\nb\n", 2, "expected one token per line, got 0 fields", true);
  expect_error("a\nb\n", 0, "no <blank> token", true);
  expect_error("<blank>\na\n", 0, "2 tokens, but the CTC head has 5 outputs", true, 5);
}

TEST_F(BadUnitsFile, FilesThatCannotBeRead) {
  expect_error(std::string(static_cast<size_t>(kMaxUnitsFileBytes) + 1, 'a'), 0, "file too large");
  const auto missing = (dir_ / "missing.txt").string();
  try {
    Units::read_wenet(missing);
    ADD_FAILURE();
  } catch (const UnitsError& e) {
    EXPECT_EQ(e.what(), missing + ": no such file");
  }
  const auto garbage = write("this is not a protobuf");
  try {
    SentencePieceModel model(garbage);
    ADD_FAILURE();
  } catch (const UnitsError& e) {
    EXPECT_THAT(e.what(), StartsWith(garbage + ": not a SentencePiece model"));
  }
  EXPECT_THROW(SentencePieceModel((dir_ / "missing.model").string()), UnitsError);
}

}  // namespace test_units
}  // namespace attnzoo::decoding
