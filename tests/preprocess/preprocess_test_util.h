// Shared by the image frontend's tests: the reference directory written by
// make_preprocess_reference.py (a CTest fixture), its manifest, and comparison helpers.
#pragma once

#include <attnzoo/io/safetensors.h>
#include <attnzoo/preprocess/image/transform.h>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <fstream>
#include <string>

namespace attnzoo::testing {

inline std::string reference_dir() { return ATTNZOO_PREPROCESS_REFERENCE_DIR; }
inline std::string reference_path(const std::string& relative) {
  return reference_dir() + "/" + relative;
}

inline const nlohmann::json& manifest() {
  static const nlohmann::json value = [] {
    std::ifstream in(reference_path("manifest.json"));
    if (!in) {
      throw std::runtime_error("no " + reference_path("manifest.json") +
                               ": run the fixture (ctest -R preprocess)");
    }
    return nlohmann::json::parse(in);
  }();
  return value;
}

inline std::string image_file(const std::string& name) {
  return reference_path(manifest()["images"][name]["file"].get<std::string>());
}

// The tensors of one reference file, loaded once.
inline const io::TensorDict& reference_tensors(const std::string& file) {
  static std::map<std::string, io::TensorDict> cache;
  auto found = cache.find(file);
  if (found == cache.end()) {
    found = cache.emplace(file, io::load_safetensors(reference_path(file)).tensors).first;
  }
  return found->second;
}

inline ImageTransformOptions options_from_json(const nlohmann::json& c) {
  ImageTransformOptions o;
  o.height = c["height"].get<int64_t>();
  o.width = c["width"].get<int64_t>();
  o.crop_pct = c["crop_pct"].get<double>();
  o.interpolation = parse_interpolation(c["interpolation"].get<std::string>());
  o.mean = c["mean"].get<std::vector<double>>();
  o.std = c["std"].get<std::vector<double>>();
  return o;
}

struct Difference {
  double max = 0.0;
  double mean = 0.0;
};

inline Difference difference(const torch::Tensor& a, const torch::Tensor& b) {
  const auto d = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs();
  return {d.max().item<double>(), d.mean().item<double>()};
}

// A scratch directory per test, removed afterwards.
class Scratch {
 public:
  Scratch() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("attnzoo_preprocess_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  ~Scratch() { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace attnzoo::testing
