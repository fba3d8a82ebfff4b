// safetensors: round trips, interchange with the reference implementation (the `safetensors`
// Python package) in both directions, and every kind of malformed file rejected with a message.
#include <attnzoo/io/safetensors.h>

#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace attnzoo::io {
namespace test_safetensors {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::read_file;
using testing::Scratch;
using testing::write_file;

namespace fs = std::filesystem;

// A file made of an explicit header and data, for the malformed cases.
std::string file_with(const std::string& header, const std::string& data,
                      int64_t claimed_length = -1) {
  const uint64_t length = claimed_length >= 0 ? claimed_length : header.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return bytes + header + data;
}

std::string error_of(const std::string& bytes) {
  try {
    load_safetensors_from_memory(bytes.data(), bytes.size(), "bad.safetensors");
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a SafetensorsError";
  return {};
}

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  Scratch scratch;
  torch::manual_seed(0);
  TensorDict tensors;
  tensors.insert("f32", torch::randn({3, 4}));
  tensors.insert("f64", torch::randn({2, 1, 3}, torch::kDouble));
  tensors.insert("f16", torch::randn({5}).to(torch::kHalf));
  tensors.insert("bf16", torch::randn({2, 2}).to(torch::kBFloat16));
  tensors.insert("i64", torch::arange(-3, 3));
  tensors.insert("i32", torch::arange(4, torch::kInt));
  tensors.insert("i16", torch::arange(4, torch::kShort));
  tensors.insert("i8", torch::arange(-2, 2, torch::kChar));
  tensors.insert("u8", torch::arange(250, 256, torch::kByte));
  tensors.insert("bool", torch::tensor({true, false}));
  tensors.insert("scalar", torch::tensor(2.5));
  tensors.insert("empty", torch::zeros({0, 3}));
  tensors.insert("transposed", torch::randn({4, 6}).t());  // non-contiguous source
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"step", "17"}};
  const auto path = scratch.path("round.safetensors");
  save_safetensors(path, tensors, metadata);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  for (const auto& loaded :
       {load_safetensors(path),
        load_safetensors_from_memory(read_file(path).data(), fs::file_size(path))}) {
    EXPECT_EQ(loaded.metadata, metadata);
    ASSERT_EQ(loaded.tensors.size(), tensors.size());
    for (const auto& item : tensors) {
      SCOPED_TRACE(item.key());
      const auto& got = loaded.tensors[item.key()];
      EXPECT_EQ(got.scalar_type(), item.value().scalar_type());
      EXPECT_EQ(got.sizes(), item.value().sizes());
      EXPECT_TRUE(torch::equal(got, item.value()));
    }
    // File order is kept.
    EXPECT_EQ(loaded.tensors.keys(), tensors.keys());
  }
}

TEST(Safetensors, HeaderIsPaddedSoDataIsAligned) {
  TensorDict tensors;
  tensors.insert("x", torch::ones({3}));
  const auto bytes = serialize_safetensors(tensors);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(length % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + length + 12);
}

TEST(Safetensors, ReadsFilesOfTheReferenceImplementation) {
  const std::string dir = ATTNZOO_IO_REFERENCE_DIR;
  const auto loaded = load_safetensors(dir + "/reference.safetensors");
  const auto expected = nlohmann::json::parse(read_file(dir + "/reference.json"));
  EXPECT_EQ(loaded.metadata.at("note"), expected["metadata"]["note"].get<std::string>());
  ASSERT_EQ(loaded.tensors.size(), expected["tensors"].size());
  for (const auto& [name, want] : expected["tensors"].items()) {
    SCOPED_TRACE(name);
    const auto& got = loaded.tensors[name];
    const std::map<std::string, torch::Dtype> python_dtypes = {
        {"torch.float32", torch::kFloat}, {"torch.float64", torch::kDouble},
        {"torch.float16", torch::kHalf},  {"torch.bfloat16", torch::kBFloat16},
        {"torch.int64", torch::kLong},    {"torch.int32", torch::kInt},
        {"torch.int16", torch::kShort},   {"torch.int8", torch::kChar},
        {"torch.uint8", torch::kByte},    {"torch.bool", torch::kBool}};
    EXPECT_EQ(got.scalar_type(), python_dtypes.at(want["dtype"].get<std::string>()));
    EXPECT_EQ(got.sizes().vec(), want["shape"].get<std::vector<int64_t>>());
    const auto values = want["values"].get<std::vector<double>>();
    const auto got_values = got.to(torch::kDouble).flatten();
    ASSERT_EQ(got_values.numel(), static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(got_values[i].item<double>(), values[i]) << "element " << i;
    }
  }
}

TEST(Safetensors, WritesFilesTheReferenceImplementationReads) {
  Scratch scratch;
  const char* python = std::getenv("ATTNZOO_PYTHON");
  ASSERT_TRUE(python && *python) << "ATTNZOO_PYTHON is not set (run the tests through ctest)";
  TensorDict tensors;
  tensors.insert("a", torch::arange(6, torch::kFloat).reshape({2, 3}));
  tensors.insert("b", torch::full({4}, 0.5, torch::kBFloat16));
  tensors.insert("c", torch::arange(5, torch::kLong));
  const auto path = scratch.path("ours.safetensors");
  save_safetensors(path, tensors, {{"who", "attnzoo"}});
  const auto json_path = scratch.path("check.json");
  const std::string command =
      std::string(python) + " " + ATTNZOO_IO_CHECK_SCRIPT + " " + path + " > " + json_path;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const auto seen = nlohmann::json::parse(read_file(json_path));
  EXPECT_EQ(seen["metadata"]["who"], "attnzoo");
  EXPECT_EQ(seen["tensors"]["a"]["dtype"], "torch.float32");
  EXPECT_EQ(seen["tensors"]["a"]["shape"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(seen["tensors"]["a"]["sum"], 15.0);
  EXPECT_EQ(seen["tensors"]["b"]["dtype"], "torch.bfloat16");
  EXPECT_EQ(seen["tensors"]["b"]["sum"], 2.0);
  EXPECT_EQ(seen["tensors"]["c"]["dtype"], "torch.int64");
  EXPECT_EQ(seen["tensors"]["c"]["sum"], 10.0);
}

TEST(Safetensors, RejectsMalformedFilesWithAMessage) {
  const std::string entry = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  EXPECT_NO_THROW(
      load_safetensors_from_memory(file_with(entry, data).data(), file_with(entry, data).size()));
  EXPECT_THAT(error_of(""), AllOf(HasSubstr("bad.safetensors"), HasSubstr("too short")));
  EXPECT_THAT(error_of(file_with(entry, data, 1000)), HasSubstr("truncated"));
  EXPECT_THAT(error_of(file_with(entry, data, int64_t{1} << 40)), HasSubstr("exceeds the limit"));
  EXPECT_THAT(error_of(file_with(entry, data.substr(0, 5))), HasSubstr("truncated"));
  EXPECT_THAT(error_of(file_with(entry, data + "xx")), HasSubstr("trailing bytes"));
  EXPECT_THAT(error_of(file_with("not json at all", "")), HasSubstr("not a JSON object"));
  EXPECT_THAT(error_of(file_with(R"({"x":)", "")), HasSubstr("not valid JSON"));
  EXPECT_THAT(
      error_of(file_with(R"({"x":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", data)),
      AllOf(HasSubstr("tensor 'x'"), HasSubstr("unknown dtype 'F33'")));
  EXPECT_THAT(
      error_of(file_with(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data)),
      AllOf(HasSubstr("need 12 bytes"), HasSubstr("give 8")));
  EXPECT_THAT(
      error_of(file_with(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data)),
      HasSubstr("non-negative"));
  EXPECT_THAT(
      error_of(file_with(R"({"x":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],)"
                         R"("data_offsets":[0,8]}})",
                         data)),
      HasSubstr("more than 2^64"));
  EXPECT_THAT(
      error_of(file_with(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data)),
      HasSubstr("end 0 < begin 8"));
  EXPECT_THAT(error_of(file_with(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("y":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                 data)),
              HasSubstr("overlaps"));
  EXPECT_THAT(
      error_of(file_with(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data)),
      HasSubstr("a hole"));
  EXPECT_THAT(error_of(file_with(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                 data)),
              HasSubstr("duplicate key 'x'"));
  EXPECT_THAT(error_of(file_with(R"({"x":{"dtype":"F32","dtype":"F16","shape":[2],)"
                                 R"("data_offsets":[0,8]}})",
                                 data)),
              HasSubstr("duplicate key 'dtype'"));
  // One name in two objects is no duplicate.
  const auto shared_name = file_with(R"({"__metadata__":{"x":"1"},)" + entry.substr(1), data);
  EXPECT_NO_THROW(load_safetensors_from_memory(shared_name.data(), shared_name.size()));
  EXPECT_THAT(error_of(file_with(R"({"__metadata__":{"a":1},)" + entry.substr(1), data)),
              HasSubstr("not a string"));
  EXPECT_THAT(
      error_of(file_with(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"z":1}})", data)),
      HasSubstr("unexpected key 'z'"));
  EXPECT_THAT(
      error_of(file_with(R"({"x":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data)),
      HasSubstr("non-negative integer"));
}

// 50,000 tensors is the limit of a file: one more is refused on the parser's first pass.
TEST(Safetensors, AtMost50000Tensors) {
  const auto header_of = [](int count) {
    std::string json = "{";
    for (int k = 0; k < count; ++k) {
      json += (k ? ",\"t" : "\"t") + std::to_string(k) + R"(":{"dtype":"U8","shape":[1],)" +
              R"("data_offsets":[)" + std::to_string(k) + "," + std::to_string(k + 1) + "]}";
    }
    return json + "}";
  };
  const auto limit = file_with(header_of(50000), std::string(50000, '\0'));
  EXPECT_EQ(load_safetensors_from_memory(limit.data(), limit.size()).tensors.size(), 50000u);
  EXPECT_THAT(error_of(file_with(header_of(50001), std::string(50001, '\0'))),
              AllOf(HasSubstr("bad.safetensors"), HasSubstr("more than 50000 tensors")));
}

TEST(Safetensors, FileErrorsNameThePath) {
  Scratch scratch;
  const auto missing = scratch.path("missing.safetensors");
  try {
    load_safetensors(missing);
    FAIL() << "no error for a missing file";
  } catch (const SafetensorsError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(missing), HasSubstr("no such file")));
  }
  try {
    load_safetensors(scratch.path(""));
    FAIL() << "no error for a directory";
  } catch (const SafetensorsError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is a directory"));
  }
  const auto text = scratch.path("text.safetensors");
  write_file(text, "hello, this is not a checkpoint\n");
  try {
    load_safetensors(text);
    FAIL() << "no error for a text file";
  } catch (const SafetensorsError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(text), HasSubstr("exceeds the limit")));
  }
}

TEST(Safetensors, AFailedSaveLeavesTheExistingFileIntact) {
  Scratch scratch;
  const auto path = scratch.path("keep.safetensors");
  TensorDict good;
  good.insert("w", torch::ones({2}));
  save_safetensors(path, good);
  const auto before = read_file(path);
  TensorDict bad;
  bad.insert("w", torch::ones({2}));
  bad.insert("complex", torch::ones({2}, torch::kComplexFloat));  // no safetensors dtype
  EXPECT_THROW(save_safetensors(path, bad), SafetensorsError);
  EXPECT_EQ(read_file(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_THROW(save_safetensors(scratch.path("no/such/dir/x.safetensors"), good), SafetensorsError);
}

TEST(Safetensors, TheFuzzSeedCorpusParsesOrFailsCleanly) {
  // Every seed (and every crash reproducer added after a fix) must parse or throw
  // SafetensorsError: nothing else, and no read outside the buffer (the sanitizer build checks).
  int files = 0;
  for (const auto& entry : fs::directory_iterator(ATTNZOO_FUZZ_CORPUS_DIR)) {
    const auto bytes = read_file(entry.path().string());
    ++files;
    try {
      load_safetensors_from_memory(bytes.data(), bytes.size(), entry.path().string());
    } catch (const SafetensorsError&) {
    }
  }
  EXPECT_GE(files, 4);
}

}  // namespace test_safetensors
}  // namespace attnzoo::io
