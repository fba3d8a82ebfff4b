// The `decoding:` section of a model with a CTC head (configs/config_sections.cpp read_decoding):
// every key read into DecodingConfig, the defaults, files resolved against the YAML's folder,
// overrides, and each refusal at its key. And ModelInput::attention_chunks: the chunk mask of one
// batch instead of the config's streaming section.
#include <attnzoo/configs/model_config.h>
#include <attnzoo/configs/model_family.h>
#include <attnzoo/configs/registry.h>

#include "config_test_util.h"

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_decoding_config {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::TempDir;
using testing::with;

// Line and column of every value are relied on below: edit with care. UNITS is replaced by the
// test's table.
const char* const kCtcModel = R"(name: ctc_test
family: conformer
architecture:
  input_dim: 20
  encoder_dim: 16
  num_layers: 1
  num_heads: 2
  ffn_dim: 24
  depthwise_conv_kernel_size: 3
  causal_conv: true
  conv_norm: layer_norm
  vocab_size: 9
features:
  kind: fbank
  num_mel_bins: 20
decoding:
  units: UNITS
  units_format: espnet
  text: words
  search: greedy
  beam_size: 6
  nbest: 3
  token_top_k: 5
  token_top_p: 0.9
  token_min_log_prob: -12.5
  beam_unit: prefix_ending
  stable_margin: 2.5
)";

// kCtcModel with only `units: UNITS` in its decoding section.
std::string minimal(const std::string& units) {
  const std::string doc = kCtcModel;
  return with(doc.substr(0, doc.find("  units_format:")), "UNITS", units);
}

// Parses `yaml` as the file `source` (not written: only its folder matters) and returns the
// ConfigError; a test failure if none.
ConfigError error_of_config(const std::string& yaml, const std::string& source,
                            const std::vector<std::string>& overrides = {}) {
  try {
    parse_model_config(yaml, source, overrides);
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return ConfigError("", "", "");
}

// The error is at source:line:column, about `key`, and says `expected`.
void expect_at(const ConfigError& e, const std::string& source, const std::string& key, int line,
               int column, const std::string& expected) {
  EXPECT_EQ(e.file(), source);
  EXPECT_EQ(e.key_path(), key);
  EXPECT_EQ(e.line(), line);
  EXPECT_EQ(e.column(), column);
  EXPECT_THAT(e.what(), StartsWith(source + ":" + std::to_string(line) + ":" +
                                   std::to_string(column) + ": " + key + ": "));
  EXPECT_THAT(e.what(), HasSubstr(expected));
}

std::string normal(const std::filesystem::path& path) { return path.lexically_normal().string(); }

TEST(DecodingConfig, ReadsEveryKey) {
  TempDir dir;
  const auto units = dir.write("models/tables/units.txt", "<blank>\n<unk>\n");
  const std::string source = (dir.path() / "models" / "ctc.yaml").string();
  const auto config = parse_model_config(with(kCtcModel, "UNITS", "tables/units.txt"), source);
  EXPECT_EQ(model_family(config.family).ctc_vocab(config), 9);
  const auto& d = config.decoding;
  EXPECT_TRUE(d.defined());
  EXPECT_EQ(d.units, normal(units));  // relative to the YAML's folder, not the working directory
  EXPECT_EQ(d.units_format, decoding::UnitsFormat::kEspnet);
  EXPECT_EQ(d.text, decoding::TextJoin::kWords);
  EXPECT_TRUE(d.sentencepiece_model.empty());
  EXPECT_EQ(d.search, decoding::CtcSearch::kGreedy);
  EXPECT_EQ(d.beam.beam_size, 6);
  EXPECT_EQ(d.beam.nbest, 3);
  EXPECT_EQ(d.beam.token_top_k, 5);
  EXPECT_DOUBLE_EQ(d.beam.token_top_p, 0.9);
  EXPECT_DOUBLE_EQ(d.beam.token_min_log_prob, -12.5);
  EXPECT_EQ(d.beam.beam_unit, decoding::BeamUnit::kPrefixEnding);
  EXPECT_DOUBLE_EQ(d.stable_margin, 2.5);

  // Overrides, validated like the file; decoding.units from an override is resolved against the
  // YAML's folder too.
  dir.write("models/other.txt", "<blank>\n");
  const auto overridden = parse_model_config(with(kCtcModel, "UNITS", "tables/units.txt"), source,
                                             {"decoding.beam_size=4", "decoding.search=prefix_beam",
                                              "decoding.units=other.txt", "decoding.token_top_p=1"})
                              .decoding;
  EXPECT_EQ(overridden.beam.beam_size, 4);
  EXPECT_EQ(overridden.search, decoding::CtcSearch::kPrefixBeam);
  EXPECT_EQ(overridden.units, normal(dir.path() / "models" / "other.txt"));
  EXPECT_DOUBLE_EQ(overridden.beam.token_top_p, 1.0);
  EXPECT_EQ(overridden.beam.nbest, 3);  // the file's, untouched
}

// decoding.tokens: the table inline (ESPnet's token_list), read by the recognizer as an ESPnet
// list; a units file given as an override replaces it, both in the document are refused.
TEST(DecodingConfig, TokensInline) {
  TempDir dir;
  const std::string source = (dir.path() / "ctc.yaml").string();
  const auto inline_tokens = with(minimal("x"), "  units: x\n",
                                  "  tokens: [<blank>, <unk>, a, b, c, d, e, f, <sos/eos>]\n");
  const auto config = parse_model_config(inline_tokens, source);
  EXPECT_TRUE(config.decoding.defined());
  EXPECT_TRUE(config.decoding.units.empty());
  EXPECT_EQ(config.decoding.tokens.size(), 9u);
  EXPECT_EQ(config.decoding.tokens.front(), "<blank>");
  dir.write("other.txt", "<blank>\n");
  const auto overridden = parse_model_config(inline_tokens, source, {"decoding.units=other.txt"});
  EXPECT_EQ(overridden.decoding.units, normal(dir.path() / "other.txt"));
  EXPECT_TRUE(overridden.decoding.tokens.empty());
  const auto both = with(inline_tokens, "  tokens:", "  units: other.txt\n  tokens:");
  EXPECT_THAT(error_of_config(both, source).what(),
              HasSubstr("a token table is decoding.units or decoding.tokens, not both"));
  EXPECT_THAT(error_of_config(with(inline_tokens, "<unk>", "\"a b\""), source).what(),
              HasSubstr("decoding.tokens: token 1 holds whitespace"));
}

TEST(DecodingConfig, FilesResolveAgainstTheYamlsFolder) {
  TempDir dir;
  const auto units = dir.write("shared/units.txt", "<blank>\n");
  const auto sp = dir.write("models/sp/bpe.model", "not parsed by the config reader");
  const auto yaml = dir.write("models/ctc.yaml",
                              with(with(kCtcModel, "UNITS", "../shared/units.txt"), "text: words",
                                   "text: sentencepiece\n  sentencepiece_model: sp/bpe.model"));
  // Read from another working directory: only the YAML's folder matters.
  struct WorkingDirectory {
    explicit WorkingDirectory(const std::filesystem::path& to)
        : before(std::filesystem::current_path()) {
      std::filesystem::current_path(to);
    }
    ~WorkingDirectory() { std::filesystem::current_path(before); }
    std::filesystem::path before;
  };
  const auto config = [&] {
    const WorkingDirectory elsewhere(dir.path() / "shared");
    return model_config_from_yaml(yaml);
  }();
  EXPECT_EQ(config.decoding.units, normal(units));
  EXPECT_EQ(config.decoding.text, decoding::TextJoin::kSentencePiece);
  EXPECT_EQ(config.decoding.sentencepiece_model, normal(sp));
  // An absolute path is taken as it is.
  const auto absolute =
      parse_model_config(minimal(units), (dir.path() / "elsewhere" / "m.yaml").string());
  EXPECT_EQ(absolute.decoding.units, normal(units));
}

TEST(DecodingConfig, AbsentKeysTakeTheDefaults) {
  TempDir dir;
  const auto units = dir.write("units.txt", "<blank>\n");
  const auto config = parse_model_config(minimal("units.txt"), (dir.path() / "m.yaml").string());
  const auto& d = config.decoding;
  const decoding::PrefixBeamSearchOptions defaults;
  EXPECT_EQ(d.units, normal(units));
  EXPECT_EQ(d.units_format, decoding::UnitsFormat::kWenet);
  EXPECT_EQ(d.text, decoding::TextJoin::kCharacters);
  EXPECT_TRUE(d.sentencepiece_model.empty());
  EXPECT_EQ(d.search, decoding::CtcSearch::kPrefixBeam);
  EXPECT_EQ(d.beam.beam_size, 10);
  EXPECT_EQ(d.beam.beam_size, defaults.beam_size);
  EXPECT_EQ(d.beam.nbest, 1);
  EXPECT_EQ(d.beam.token_top_k, 0);
  EXPECT_DOUBLE_EQ(d.beam.token_top_p, 1.0);
  EXPECT_TRUE(std::isinf(d.beam.token_min_log_prob) && d.beam.token_min_log_prob < 0);
  EXPECT_EQ(d.beam.beam_unit, decoding::BeamUnit::kPrefix);
  EXPECT_EQ(d.stable_margin, 0.0);
  // No section: nothing defined (the recognizer then needs a table of its own).
  const std::string doc = kCtcModel;
  const auto none =
      parse_model_config(doc.substr(0, doc.find("decoding:")), (dir.path() / "m.yaml").string());
  EXPECT_FALSE(none.decoding.defined());
  EXPECT_TRUE(none.decoding.units.empty());
  EXPECT_EQ(model_family(none.family).ctc_vocab(none), 9);
  // Families without a CTC head.
  const auto vit = parse_model_config(testing::kTinyConfig, "vit.yaml");
  EXPECT_EQ(model_family(vit.family).ctc_vocab(vit), 0);
  const auto no_head = parse_model_config(
      with(doc.substr(0, doc.find("decoding:")), "  vocab_size: 9\n", ""), "m.yaml");
  EXPECT_EQ(model_family(no_head.family).ctc_vocab(no_head), 0);
}

TEST(DecodingConfig, EachRefusalNamesItsKey) {
  TempDir dir;
  dir.write("units.txt", "<blank>\n");
  dir.write("bpe.model", "x");
  const std::string source = (dir.path() / "bad.yaml").string();
  const auto doc = with(kCtcModel, "UNITS", "units.txt");
  const auto bad = [&](const std::string& from, const std::string& to) {
    return error_of_config(with(doc, from, to), source);
  };
  // The table must exist, relative to the YAML.
  expect_at(bad("units: units.txt", "units: missing.txt"), source, "decoding.units", 17, 10,
            "'" + normal(dir.path() / "missing.txt") +
                "' is not a file (paths are relative to the YAML)");
  expect_at(bad("units: units.txt", "units: ."), source, "decoding.units", 17, 10, "is not a file");
  // Required once the section is there.
  {
    const auto e = bad("  units: units.txt\n", "");
    EXPECT_EQ(e.key_path(), "decoding.units");
    EXPECT_THAT(e.what(), StartsWith(source + ":"));
  }
  // No CTC or transducer head: no decoding section.
  {
    const auto e = bad("  vocab_size: 9\n", "");
    EXPECT_EQ(e.key_path(), "decoding");
    EXPECT_EQ(e.file(), source);
    EXPECT_EQ(e.line(), 16);
    EXPECT_THAT(e.what(), HasSubstr("a decoding section needs a CTC or transducer head "
                                    "(architecture.vocab_size > 0)"));
    const auto o = error_of_config(doc, source, {"architecture.vocab_size=0"});
    EXPECT_EQ(o.key_path(), "decoding");
    EXPECT_THAT(o.what(), HasSubstr("needs a CTC or transducer head"));
  }
  // A family without a CTC head has no such key at all.
  {
    const auto e = error_of_config(std::string(testing::kTinyConfig) + "decoding:\n  units: " +
                                       (dir.path() / "units.txt").string() + "\n",
                                   source);
    EXPECT_EQ(e.key_path(), "decoding");
    EXPECT_THAT(e.what(), HasSubstr("unknown key 'decoding'"));
  }
  // nbest within the beam: at nbest when the file sets it, at an overriding beam_size.
  expect_at(bad("beam_size: 6", "beam_size: 2"), source, "decoding.nbest", 22, 10,
            "nbest 3 exceeds beam_size 2 (the beam holds the hypotheses returned)");
  {
    const auto e = error_of_config(doc, source, {"decoding.beam_size=2"});
    EXPECT_EQ(e.key_path(), "decoding.beam_size");
    EXPECT_EQ(e.line(), 0);
    EXPECT_THAT(e.what(), StartsWith(source + ": override 'decoding.beam_size=2': "
                                              "decoding.beam_size: nbest 3 exceeds beam_size 2"));
  }
  {
    const auto e =
        error_of_config(with(doc, "  beam_size: 6\n", ""), source, {"decoding.nbest=11"});
    EXPECT_EQ(e.key_path(), "decoding.nbest");
    EXPECT_THAT(e.what(), HasSubstr("nbest 11 exceeds beam_size 10"));
  }
  // A SentencePiece model goes with text: sentencepiece (and must exist).
  expect_at(bad("text: words", "text: words\n  sentencepiece_model: bpe.model"), source,
            "decoding.sentencepiece_model", 20, 24,
            "a SentencePiece model goes with text: sentencepiece");
  expect_at(bad("text: words", "text: sentencepiece\n  sentencepiece_model: no.model"), source,
            "decoding.sentencepiece_model", 20, 24, "is not a file");
  // Closed choices list their names.
  expect_at(bad("units_format: espnet", "units_format: kaldi"), source, "decoding.units_format", 18,
            17, "expected one of wenet, espnet, got 'kaldi'");
  expect_at(bad("text: words", "text: bpe"), source, "decoding.text", 19, 9,
            "expected one of characters, words, sentencepiece");
  expect_at(bad("search: greedy", "search: viterbi"), source, "decoding.search", 20, 11,
            "expected one of greedy, prefix_beam");
  expect_at(bad("beam_unit: prefix_ending", "beam_unit: path"), source, "decoding.beam_unit", 26,
            14, "expected one of prefix, prefix_ending");
  // Ranges.
  expect_at(bad("beam_size: 6", "beam_size: 0"), source, "decoding.beam_size", 21, 14,
            "expected an integer in [1, 10000]");
  expect_at(bad("nbest: 3", "nbest: 0"), source, "decoding.nbest", 22, 10,
            "expected an integer in [1, 10000]");
  expect_at(bad("token_top_k: 5", "token_top_k: -1"), source, "decoding.token_top_k", 23, 16,
            "expected an integer in [0,");
  expect_at(bad("token_top_p: 0.9", "token_top_p: 0"), source, "decoding.token_top_p", 24, 16,
            "expected a number in (0, 1]");
  expect_at(bad("token_min_log_prob: -12.5", "token_min_log_prob: 1"), source,
            "decoding.token_min_log_prob", 25, 23, "0]");
  expect_at(bad("stable_margin: 2.5", "stable_margin: -1"), source, "decoding.stable_margin", 27,
            18, "expected a number in [0, 1000000]");
  // Unknown keys, listing every key the section reads.
  expect_at(
      bad("  beam_unit: prefix_ending", "  beam_unit: prefix_ending\n  beam: 4"), source,
      "decoding.beam", 27, 3,
      "unknown key 'beam'; expected one of units, tokens, units_format, text, sentencepiece_model, "
      "search, beam_size, nbest, token_top_k, token_top_p, token_min_log_prob, beam_unit, "
      "stable_margin");
  {
    const auto e = error_of_config(doc, source, {"decoding.lm_weight=0.5"});
    EXPECT_EQ(e.key_path(), "decoding.lm_weight");
    EXPECT_THAT(e.what(), HasSubstr("unknown key 'lm_weight'"));
  }
}

// ModelInput::attention_chunks replaces the config's streaming section for one batch: the same
// weights under a config with that chunk mask give the same outputs, in forward (offline and
// chunk by chunk) and classify.
TEST(AttentionChunks, EqualTheConfigsChunkMask) {
  const std::string yaml =
      std::string(ATTNZOO_CONFIGS_TEST_DATA_DIR) + "/conformer_micro_stream.yaml";
  const std::vector<std::string> head = {"architecture.num_classes=3"};
  const auto config_with = [&](const std::string& chunk, const std::string& left) {
    auto overrides = head;
    overrides.push_back("streaming.chunk_size=" + chunk);
    overrides.push_back("streaming.num_left_chunks=" + left);
    return model_config_from_yaml(yaml, overrides);
  };
  const auto full = config_with("0", "-1");
  const auto chunk4 = config_with("4", "-1");
  const auto chunk4_left1 = config_with("4", "1");
  const auto& family = model_family(full.family);
  const auto build = [](const ModelConfig& config) {
    torch::manual_seed(0);
    auto model = build_model(config);
    model.module->eval();
    return model;
  };
  auto full_model = build(full);
  auto chunk4_model = build(chunk4);
  auto left1_model = build(chunk4_left1);
  // The same weights in all three.
  const auto a = full_model.module->named_parameters();
  const auto b = chunk4_model.module->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& item : a) EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key();

  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  // 97 and 61 feature frames: 23 and 14 encoder frames, 6 and 4 chunks of 4.
  ModelInput input(torch::randn({2, 97, 20}), torch::tensor({97, 61}, torch::kLong));
  const auto named = [](const NamedTensors& outputs, const std::string& name) {
    for (const auto& [key, value] : outputs) {
      if (key == name) return value;
    }
    ADD_FAILURE() << "no output " << name;
    return torch::Tensor();
  };
  const auto valid = [](const torch::Tensor& t) {
    return torch::cat({t[0], t[1].narrow(0, 0, 14)});
  };
  const auto expect_same = [&](const NamedTensors& got, const NamedTensors& want,
                               const std::string& what) {
    SCOPED_TRACE(what);
    for (const std::string name : {"encoded", "logits"}) {
      const auto g = named(got, name), w = named(want, name);
      ASSERT_EQ(g.sizes(), w.sizes()) << name;
      EXPECT_LE((valid(g) - valid(w)).abs().max().item<double>(), 1e-6) << name;
    }
    EXPECT_TRUE(torch::equal(named(got, "lengths"), named(want, "lengths")));
    const auto gc = named(got, "class_logits"), wc = named(want, "class_logits");
    EXPECT_LE((gc - wc).abs().max().item<double>(), 1e-6) << "class_logits";
  };
  const auto max_diff = [&](const NamedTensors& x, const NamedTensors& y) {
    return (valid(named(x, "encoded")) - valid(named(y, "encoded"))).abs().max().item<double>();
  };

  auto chunked_input = input;
  chunked_input.attention_chunks = StreamingConfig{4, -1};
  const auto full_out = family.forward(*full_model.module, full, input, false);
  const auto by_input = family.forward(*full_model.module, full, chunked_input, false);
  const auto by_config = family.forward(*chunk4_model.module, chunk4, input, false);
  expect_same(by_input, by_config, "chunk 4, every left chunk");
  // The mask matters: full context differs, so the equality above means something.
  EXPECT_GT(max_diff(by_input, full_out), 1e-3);
  // And back: a chunked config with attention_chunks {0, -1} sees the whole utterance.
  auto unchunked_input = input;
  unchunked_input.attention_chunks = StreamingConfig{0, -1};
  expect_same(family.forward(*chunk4_model.module, chunk4, unchunked_input, false), full_out,
              "chunk 0 over a chunked config");
  // num_left_chunks is taken from the input too.
  auto left1_input = input;
  left1_input.attention_chunks = StreamingConfig{4, 1};
  const auto left1 = family.forward(*full_model.module, full, left1_input, false);
  expect_same(left1, family.forward(*left1_model.module, chunk4_left1, input, false),
              "chunk 4, one left chunk");
  EXPECT_GT(max_diff(left1, by_config), 1e-3);
  // classify() reads it as forward() does.
  const auto classified = family.classify(*full_model.module, full, chunked_input);
  EXPECT_LE((classified - family.classify(*chunk4_model.module, chunk4, input))
                .abs()
                .max()
                .item<double>(),
            1e-6);
  EXPECT_GT(
      (classified - family.classify(*full_model.module, full, input)).abs().max().item<double>(),
      1e-4);
  // Chunk by chunk (one utterance): the input's chunks, not the config's (which has none).
  ModelInput one(input.values.narrow(0, 0, 1));
  auto one_chunked = one;
  one_chunked.attention_chunks = StreamingConfig{4, 1};
  const auto streamed = family.forward(*full_model.module, full, one_chunked, true);
  const auto streamed_by_config = family.forward(*left1_model.module, chunk4_left1, one, true);
  EXPECT_LE((named(streamed, "encoded") - named(streamed_by_config, "encoded"))
                .abs()
                .max()
                .item<double>(),
            1e-6);
  EXPECT_LE((named(streamed, "encoded")[0] - named(left1, "encoded")[0]).abs().max().item<double>(),
            1e-4);
}

}  // namespace test_decoding_config
}  // namespace attnzoo
