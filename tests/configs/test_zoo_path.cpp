// Where the zoo is found at run time: the order of the search path (folders added by the
// program, $ATTNZOO_ZOO_PATH, the zoo beside the library), what is skipped, and the build tree's
// own zoo, reached through the library's location and not through a compiled-in path.
#include <attnzoo/configs/zoo_path.h>

#include <attnzoo/configs/registry.h>

#include "config_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

namespace attnzoo {
namespace test_zoo_path {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ScopedEnv;
using testing::TempDir;

// Forgets the folders a test added, also when it fails.
struct AddedFoldersCleared {
  AddedFoldersCleared() { clear_added_zoo_folders(); }
  ~AddedFoldersCleared() { clear_added_zoo_folders(); }
};

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  return fs::equivalent(a, b, error);
}

TEST(ZooPath, TheBuildTreeFindsTheSourceZooThroughTheLibrarysLocation) {
  AddedFoldersCleared cleared;
  ScopedEnv env(kZooPathVariable, "");
  const auto path = zoo_search_path();
  ASSERT_EQ(path.size(), 1u);
  // The registry's code is in build/lib/libattnzoo_configs.so (or, linked statically, in this
  // program in build/bin): the zoo is build/share/attnzoo, links to the source tree's configs/
  // folders and assets/weights and assets/samples.
  const fs::path library = attnzoo_library_file();
  EXPECT_EQ(fs::path(path[0].path), library.parent_path().parent_path() / "share" / "attnzoo");
  EXPECT_EQ(path[0].origin, ZooFolderOrigin::kBuildTree);
  EXPECT_TRUE(path[0].exists);
  const fs::path zoo = path[0].path, configs = ATTNZOO_CONFIGS_SOURCE_DIR;
  EXPECT_TRUE(same_file((zoo / "vit").string(), (configs / "vit").string()));
  EXPECT_TRUE(same_file((zoo / "labels").string(), (configs / "labels").string()));
  EXPECT_TRUE(
      same_file((zoo / "weights").string(), (configs / ".." / "assets" / "weights").string()));
  EXPECT_TRUE(
      same_file((zoo / "samples").string(), (configs / ".." / "assets" / "samples").string()));
  EXPECT_TRUE(find_in_zoo("weights/vit_digits.safetensors").has_value());
  EXPECT_THAT(zoo_folders(), ElementsAre(path[0].path));
}

TEST(ZooPath, AddedFoldersThenTheVariableThenTheZooInOrder) {
  AddedFoldersCleared cleared;
  TempDir a, b, c, d;
  const auto missing = (a.path() / "missing").string();
  // Empty entries (a leading, doubled or trailing colon) are skipped; a missing folder is listed
  // but not searched.
  ScopedEnv env(kZooPathVariable,
                ":" + c.path().string() + "::" + missing + ":" + d.path().string() + ":");
  add_zoo_folder(a.path().string());
  add_zoo_folder(b.path().string());
  const auto path = zoo_search_path();
  ASSERT_EQ(path.size(), 6u);
  EXPECT_EQ(path[0].path, a.path().string());
  EXPECT_EQ(path[0].origin, ZooFolderOrigin::kAdded);
  EXPECT_EQ(path[1].path, b.path().string());
  EXPECT_EQ(path[2].path, c.path().string());
  EXPECT_EQ(path[2].origin, ZooFolderOrigin::kEnvironment);
  EXPECT_EQ(path[3].path, missing);
  EXPECT_FALSE(path[3].exists);
  EXPECT_EQ(path[4].path, d.path().string());
  EXPECT_EQ(path[5].origin, ZooFolderOrigin::kBuildTree);
  EXPECT_THAT(zoo_folders(), ElementsAre(a.path().string(), b.path().string(), c.path().string(),
                                         d.path().string(), path[5].path));
  EXPECT_STREQ(zoo_folder_origin_name(ZooFolderOrigin::kEnvironment), "ATTNZOO_ZOO_PATH");
}

TEST(ZooPath, AFolderGivenTwiceIsSearchedOnce) {
  AddedFoldersCleared cleared;
  TempDir a;
  const auto build_zoo = zoo_search_path().back().path;  // the build tree's, beside the library
  ScopedEnv env(kZooPathVariable, a.path().string() + ":" + build_zoo);
  add_zoo_folder(a.path().string());
  const auto folders = zoo_folders();
  // a once; the build tree's zoo once, although the variable leads there too.
  ASSERT_EQ(folders.size(), 2u);
  EXPECT_EQ(folders[0], a.path().string());
  EXPECT_TRUE(same_file(folders[1], build_zoo));
}

TEST(ZooPath, AddingSomethingThatIsNotAFolderIsAnError) {
  AddedFoldersCleared cleared;
  TempDir a;
  const auto file = a.write("model.yaml", "name: x\n");
  try {
    add_zoo_folder(file);
    ADD_FAILURE() << "no error for a file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(file + ": not a directory"));
  }
  EXPECT_THROW(add_zoo_folder((a.path() / "none").string()), Error);
  EXPECT_EQ(zoo_search_path().front().origin, ZooFolderOrigin::kBuildTree);
}

TEST(ZooPath, FindInZooTakesTheFirstFolderThatHasTheFile) {
  AddedFoldersCleared cleared;
  TempDir a, b;
  ScopedEnv env(kZooPathVariable, a.path().string() + ":" + b.path().string());
  const auto in_b = b.write("labels/mine.txt", "x\n");
  EXPECT_EQ(find_in_zoo("labels/mine.txt"), in_b);
  const auto in_a = a.write("labels/mine.txt", "y\n");
  EXPECT_EQ(find_in_zoo("labels/mine.txt"), in_a);
  // The zoo's own files are found after the user's folders.
  const auto imagenet = find_in_zoo("labels/imagenet1k.txt");
  ASSERT_TRUE(imagenet.has_value());
  EXPECT_TRUE(
      same_file(*imagenet, std::string(ATTNZOO_CONFIGS_SOURCE_DIR) + "/labels/imagenet1k.txt"));
  EXPECT_FALSE(find_in_zoo("labels/none.txt").has_value());
  EXPECT_FALSE(find_in_zoo("labels").has_value()) << "a folder is not a file";
}

TEST(ZooPath, TheDefaultRegistrySearchesAddedFoldersFirst) {
  AddedFoldersCleared cleared;
  ScopedEnv env(kZooPathVariable, "");
  TempDir a;
  a.write("m.yaml", testing::with(testing::kTinyConfig, "name: tiny_test", "name: added_one"));
  add_zoo_folder(a.path().string());
  const auto registry = default_registry();
  EXPECT_EQ(registry.folders().front(), a.path().string());
  EXPECT_TRUE(registry.contains("added_one"));
  EXPECT_TRUE(registry.contains("vit_digits"));
}

}  // namespace test_zoo_path
}  // namespace attnzoo
