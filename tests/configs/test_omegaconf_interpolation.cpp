// OmegaConf's interpolations resolved in C++ (configs/omegaconf_interpolation.h) against
// OmegaConf itself (make_omegaconf_reference.py): absolute and relative paths, whole maps and
// lists, strings with several interpolations, list indices both ways, chains, an interpolation
// through another, one inside a key, escapes and nulls give OmegaConf's values; a missing key, a
// cycle and a ??? value are refused where OmegaConf raises, and resolvers by design.
#include <attnzoo/configs/omegaconf_interpolation.h>
#include <attnzoo/core/error.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

#include <cmath>
#include <fstream>

namespace attnzoo::detail {
namespace test_omegaconf_interpolation {

using testing::error_of;
using ::testing::HasSubstr;

// Our resolved node equals OmegaConf's value (JSON types; our scalars are YAML text).
void expect_same(const YAML::Node& ours, const nlohmann::json& theirs, const std::string& at) {
  SCOPED_TRACE(at);
  if (theirs.is_object()) {
    ASSERT_TRUE(ours.IsMap());
    EXPECT_EQ(ours.size(), theirs.size());
    for (const auto& [key, value] : theirs.items()) {
      ASSERT_TRUE(ours[key].IsDefined()) << key;
      expect_same(ours[key], value, at + "." + key);
    }
  } else if (theirs.is_array()) {
    ASSERT_TRUE(ours.IsSequence());
    ASSERT_EQ(ours.size(), theirs.size());
    for (size_t i = 0; i < theirs.size(); ++i) {
      expect_same(ours[i], theirs[i], at + "[" + std::to_string(i) + "]");
    }
  } else if (theirs.is_null()) {
    EXPECT_TRUE(ours.IsNull()) << YAML::Dump(ours);
  } else if (theirs.is_boolean()) {
    EXPECT_EQ(ours.as<bool>(), theirs.get<bool>());
  } else if (theirs.is_number_integer()) {
    EXPECT_EQ(ours.as<int64_t>(), theirs.get<int64_t>());
  } else if (theirs.is_number()) {
    EXPECT_EQ(ours.as<double>(), theirs.get<double>());
  } else {
    EXPECT_EQ(ours.Scalar(), theirs.get<std::string>());
  }
}

TEST(OmegaConfInterpolation, ResolvesAsOmegaConfDoes) {
  std::ifstream in(std::string(ATTNZOO_CONFIGS_REFERENCE_DIR) + "/omegaconf_cases.json");
  ASSERT_TRUE(in) << "run ctest -R configs.make_omegaconf_reference";
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 14u);
  const std::map<std::string, std::string> refusals = {
      {"missing_key", "a: the interpolation's key 'nope' does not exist"},
      {"cycle", "b: the interpolation of 'a' refers back to itself (a cycle)"},
      {"missing_value", "b: 'a' is ??? (a value OmegaConf leaves missing)"},
      {"resolver", "h: '${oc.env:HOME}' calls the resolver 'oc.env', which attnzoo does not run"},
  };
  for (const auto& [name, c] : cases.items()) {
    SCOPED_TRACE(name);
    const auto root = YAML::Load(c["yaml"].get<std::string>());
    const std::string before = YAML::Dump(root);
    if (refusals.count(name)) {
      EXPECT_THAT(error_of([&] { resolve_interpolations(root, "m.yaml"); }),
                  HasSubstr("m.yaml: " + refusals.at(name)));
      // OmegaConf refuses these too, but for the resolver, which we refuse by design.
      EXPECT_EQ(c.contains("error"), name != "resolver");
    } else {
      ASSERT_TRUE(c.contains("resolved")) << c.dump();
      expect_same(resolve_interpolations(root, "m.yaml"), c["resolved"], "<root>");
    }
    EXPECT_EQ(YAML::Dump(root), before) << "the document itself changed";
  }
}

// Chains that double at every step: ten levels resolve (each node once, repeated parts shared),
// forty would expand to 2^40 nodes and are refused; syntax OmegaConf would refuse is an error
// naming the key.
TEST(OmegaConfInterpolation, BoundedAndStrict) {
  auto laughs = [](int levels) {
    std::string text = "l0: [x, x]\n";
    for (int i = 1; i < levels; ++i) {
      const std::string previous = "'${l" + std::to_string(i - 1) + "}'";
      text += "l" + std::to_string(i) + ": [" + previous + ", " + previous + "]\n";
    }
    return YAML::Load(text);
  };
  const auto ten = resolve_interpolations(laughs(10), "laughs.yaml");
  EXPECT_EQ(ten["l9"][0][1][0][1][0][1][0][1][0][1].Scalar(), "x");
  EXPECT_THAT(error_of([&] { resolve_interpolations(laughs(40), "laughs.yaml"); }),
              HasSubstr("resolves to more than 1000000 nodes"));
  EXPECT_THAT(error_of([] { resolve_interpolations(YAML::Load("a: ${b\n"), "s.yaml"); }),
              HasSubstr("s.yaml: a: an interpolation without its closing brace"));
  EXPECT_THAT(error_of([] { resolve_interpolations(YAML::Load("a: ${b c}\nb: 1\n"), "s.yaml"); }),
              HasSubstr("s.yaml: a: '${b c}' is not a key path"));
  EXPECT_THAT(error_of([] { resolve_interpolations(YAML::Load("a: ${...b}\n"), "s.yaml"); }),
              HasSubstr("goes above the document's root"));
  EXPECT_THAT(
      error_of([] { resolve_interpolations(YAML::Load("m: {x: 1}\na: s_${m}\n"), "s.yaml"); }),
      HasSubstr("s.yaml: a: 'm' is a map or a list, inside a string"));
}

}  // namespace test_omegaconf_interpolation
}  // namespace attnzoo::detail
