// What the decoding tests share: the references decoding.make_reference writes, and the search
// options a beam case names.
#pragma once

#include <attnzoo/decoding/ctc_decoder.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

namespace attnzoo::testing {

// A JSON file of the reference folder (the CTest fixture decoding.make_reference writes it).
inline nlohmann::json load_reference(const std::string& name) {
  std::ifstream in(std::string(ATTNZOO_DECODING_REFERENCE_DIR) + "/" + name);
  EXPECT_TRUE(in) << name << " missing: run ctest (decoding.make_reference writes it)";
  return nlohmann::json::parse(in);
}

// The options a beam case of beam_cases.json names: its beam (every hypothesis returned), blank
// and per-frame top-k.
inline decoding::PrefixBeamSearchOptions case_options(const nlohmann::json& c,
                                                      decoding::BeamUnit unit) {
  decoding::PrefixBeamSearchOptions o;
  o.beam_size = c.at("beam").get<int64_t>();
  o.nbest = o.beam_size;
  o.blank_id = c.at("blank").get<int64_t>();
  o.token_top_k = c.at("top_k").get<int64_t>();
  o.beam_unit = unit;
  return o;
}

}  // namespace attnzoo::testing
