// A folder of reference files that a CTest fixture writes (a Python script that runs the libraries
// a test binary compares with): manifest.json, which describes the cases, and safetensors files of
// the expected tensors. Each file is read once per test binary.
#pragma once

#include <attnzoo/io/safetensors.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace attnzoo::testing {

class ReferenceFiles {
 public:
  // `fixture`: what `ctest -R` runs to write the folder, named when manifest.json is missing.
  ReferenceFiles(std::string dir, std::string fixture)
      : dir_(std::move(dir)), fixture_(std::move(fixture)) {}

  // A file of the folder by its path relative to it.
  std::string path(const std::string& relative) const { return dir_ + "/" + relative; }

  const nlohmann::json& manifest() const {
    if (!manifest_) {
      std::ifstream in(path("manifest.json"));
      if (!in) {
        throw std::runtime_error("no " + path("manifest.json") + ": run the fixture (ctest -R " +
                                 fixture_ + ")");
      }
      manifest_ = nlohmann::json::parse(in);
    }
    return *manifest_;
  }

  // The tensors of one safetensors file of the folder.
  const io::TensorDict& tensors(const std::string& file) const {
    auto found = tensors_.find(file);
    if (found == tensors_.end()) {
      found = tensors_.emplace(file, io::load_safetensors(path(file)).tensors).first;
    }
    return found->second;
  }

 private:
  std::string dir_;
  std::string fixture_;
  mutable std::optional<nlohmann::json> manifest_;
  mutable std::map<std::string, io::TensorDict> tensors_;
};

}  // namespace attnzoo::testing
