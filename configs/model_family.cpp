#include <attnzoo/configs/model_family.h>

#include <attnzoo/configs/families.h>

#include <map>
#include <set>

namespace attnzoo {
namespace {

// Every family, by name. A new family adds its factory here.
const std::map<std::string, std::unique_ptr<ModelFamily>>& families() {
  static const auto registry = [] {
    std::map<std::string, std::unique_ptr<ModelFamily>> map;
    std::unique_ptr<ModelFamily> list[] = {make_vit_family(), make_conformer_family(),
                                           make_ast_family()};
    for (auto& family : list) {
      const std::string name = family->name();
      map.emplace(name, std::move(family));
    }
    return map;
  }();
  return registry;
}

}  // namespace

int64_t ModelFamily::ctc_vocab(const ModelConfig&) const { return 0; }
int64_t ModelFamily::token_vocab(const ModelConfig& config) const { return ctc_vocab(config); }

int64_t ModelFamily::min_frames(const ModelConfig&) const { return 1; }

double ModelFamily::frame_ms(const ModelConfig&) const { return 0.0; }

void ModelFamily::check_stream(const ModelConfig&, const ModelInput&) const {
  throw InputError("a " + name() + " model does not stream");
}

const char* input_kind_name(InputKind kind) {
  return kind == InputKind::kImages ? "images" : "audio";
}

const ModelFamily& model_family(const std::string& name) {
  const auto& all = families();
  const auto it = all.find(name);
  if (it == all.end()) {
    std::string known;
    for (const auto& item : all) known += (known.empty() ? "" : ", ") + item.first;
    throw ConfigError("unknown model family '" + name + "'; expected one of " + known, "",
                      "family");
  }
  return *it->second;
}

std::vector<std::string> model_family_names() {
  std::vector<std::string> names;
  for (const auto& item : families()) names.push_back(item.first);
  return names;
}

std::vector<std::string> all_checkpoint_formats() {
  std::set<std::string> formats;
  for (const auto& item : families()) {
    for (auto& format : item.second->checkpoint_formats()) formats.insert(std::move(format));
  }
  return {formats.begin(), formats.end()};
}

}  // namespace attnzoo
