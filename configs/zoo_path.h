// Where the zoo is at run time: the folders searched for model configs (by name), their labels,
// shipped weights and samples. Nothing absolute is compiled in. In order:
//   1. folders added by the program: add_zoo_folder() (the CLI's --zoo), first added first;
//   2. $ATTNZOO_ZOO_PATH, colon-separated, in its order;
//   3. the installed zoo, <prefix>/share/attnzoo, found relative to the attnzoo library that
//      holds this code (or the program, when attnzoo is linked statically): an installed prefix
//      can be moved or copied and still finds its own zoo;
//   4. in a build tree, the source tree's zoo: the build is laid out as a prefix, and its
//      share/attnzoo holds links to configs/'s folders and to assets/weights and assets/samples.
// A model name resolves to the first folder that defines it, so a user's folder shadows a model
// of the zoo or adds new ones (configs/registry.h). The same idea as OpenCV's
// cv::samples::findFile with addSamplesDataSearchPath and OPENCV_SAMPLES_DATA_PATH.
//
//   attnzoo::add_zoo_folder("/opt/my_models");          // searched before everything else
//   auto labels = attnzoo::find_in_zoo("labels/imagenet1k.txt");
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

// The environment variable of rule 2.
inline constexpr const char* kZooPathVariable = "ATTNZOO_ZOO_PATH";

enum class ZooFolderOrigin {
  kAdded,        // add_zoo_folder()
  kEnvironment,  // $ATTNZOO_ZOO_PATH
  kInstalled,    // <prefix>/share/attnzoo beside the library
  kBuildTree,    // the build tree's share/attnzoo: links into the source tree
};
const char* zoo_folder_origin_name(ZooFolderOrigin origin);

struct ZooFolder {
  std::string path;
  ZooFolderOrigin origin;
  bool exists = false;  // a directory that can be read
};

// Every place looked at, in order, whether it exists or not (what `attnzoo version` prints).
std::vector<ZooFolder> zoo_search_path();
// The folders of zoo_search_path() that exist, in order, each once.
std::vector<std::string> zoo_folders();

// Adds `folder` to rule 1, after the folders added before it (process-wide, thread-safe).
// Throws attnzoo::Error when it is not a directory.
void add_zoo_folder(const std::string& folder);
// Forgets the folders of rule 1.
void clear_added_zoo_folders();

// The file at `relative` (e.g. "labels/imagenet1k.txt") in the first zoo folder that has it.
std::optional<std::string> find_in_zoo(const std::string& relative);

// The file that holds attnzoo's code in this process: the shared library of attnzoo::configs, or
// the program when it is linked statically. Empty when it cannot be told.
std::string attnzoo_library_file();

}  // namespace attnzoo
