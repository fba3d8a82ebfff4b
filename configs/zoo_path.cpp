#include <attnzoo/configs/zoo_path.h>

#include <attnzoo/core/error.h>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <system_error>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;

std::mutex& added_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<std::string>& added_folders() {
  static std::vector<std::string> folders;
  return folders;
}

bool is_zoo_directory(const fs::path& path) {
  std::error_code error;
  return fs::is_directory(path, error);
}

// The program's own file, through /proc (Linux): what a statically linked attnzoo lives in.
fs::path program_file() {
  std::error_code error;
  const auto path = fs::read_symlink("/proc/self/exe", error);
  return error ? fs::path() : path;
}

fs::path canonical_or_empty(const fs::path& path) {
  std::error_code error;
  const auto resolved = fs::canonical(path, error);
  return error ? fs::path() : resolved;
}

}  // namespace

const char* zoo_folder_origin_name(ZooFolderOrigin origin) {
  switch (origin) {
    case ZooFolderOrigin::kAdded:
      return "added (--zoo)";
    case ZooFolderOrigin::kEnvironment:
      return kZooPathVariable;
    case ZooFolderOrigin::kInstalled:
      return "installed";
    case ZooFolderOrigin::kBuildTree:
      return "build tree";
  }
  return "unknown";
}

std::string attnzoo_library_file() {
  // dladdr names the object that holds this function: the shared library, or for the program
  // itself whatever it was started as (possibly a relative argv[0]), so the program's file is
  // taken from /proc instead.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&attnzoo_library_file), &info) != 0 && info.dli_fname &&
      fs::path(info.dli_fname).is_absolute()) {
    const auto file = canonical_or_empty(info.dli_fname);
    if (!file.empty()) return file.string();
  }
  return canonical_or_empty(program_file()).string();
}

std::vector<ZooFolder> zoo_search_path() {
  std::vector<ZooFolder> path;
  const auto add = [&](const fs::path& folder, ZooFolderOrigin origin) {
    path.push_back({folder.string(), origin, is_zoo_directory(folder)});
  };
  {
    const std::lock_guard<std::mutex> lock(added_mutex());
    for (const auto& folder : added_folders()) add(folder, ZooFolderOrigin::kAdded);
  }
  if (const char* variable = std::getenv(kZooPathVariable)) {
    const std::string value = variable;
    for (size_t begin = 0; begin <= value.size();) {
      const auto end = std::min(value.find(':', begin), value.size());
      if (end > begin) add(value.substr(begin, end - begin), ZooFolderOrigin::kEnvironment);
      begin = end + 1;
    }
  }
  const fs::path library = attnzoo_library_file();
  if (!library.empty()) {
    const bool in_program = library == canonical_or_empty(program_file());
    const auto zoo =
        (library.parent_path() / (in_program ? ATTNZOO_BINDIR_TO_ZOO : ATTNZOO_LIBDIR_TO_ZOO))
            .lexically_normal();
    // A build tree's zoo is made of links into the source tree (cmake/Project.cmake).
    std::error_code error;
    add(zoo, fs::is_symlink(zoo / "labels", error) ? ZooFolderOrigin::kBuildTree
                                                   : ZooFolderOrigin::kInstalled);
  }
  return path;
}

std::vector<std::string> zoo_folders() {
  std::vector<std::string> folders;
  std::vector<fs::path> seen;
  for (const auto& folder : zoo_search_path()) {
    if (!folder.exists) continue;
    const auto resolved = canonical_or_empty(folder.path);
    bool repeated = false;
    for (const auto& other : seen) repeated = repeated || other == resolved;
    if (repeated) continue;
    seen.push_back(resolved);
    folders.push_back(folder.path);
  }
  return folders;
}

void add_zoo_folder(const std::string& folder) {
  if (!is_zoo_directory(folder)) {
    throw Error(folder + ": not a directory (a zoo folder holds model YAML files)");
  }
  const std::lock_guard<std::mutex> lock(added_mutex());
  added_folders().push_back(folder);
}

void clear_added_zoo_folders() {
  const std::lock_guard<std::mutex> lock(added_mutex());
  added_folders().clear();
}

std::optional<std::string> find_in_zoo(const std::string& relative) {
  for (const auto& folder : zoo_folders()) {
    const auto file = fs::path(folder) / relative;
    std::error_code error;
    if (fs::is_regular_file(file, error)) return file.string();
  }
  return std::nullopt;
}

}  // namespace attnzoo
