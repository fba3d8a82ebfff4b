// Files written so that they survive a kill: the destination changes only at commit, whole; a
// writer that fails or is dropped leaves the old file and no temporary; temporaries of killed
// writers are cleaned up, those of live ones are not. Killing a real writer is
// tests/cli/kill_test.py's part.
#include <attnzoo/core/error.h>
#include <attnzoo/io/atomic_file.h>

#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace attnzoo::io {
namespace test_atomic_file {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::read_file;
using ::testing::UnorderedElementsAre;

fs::path fresh_dir(const std::string& name) { return testing::fresh_dir("atomic_" + name); }

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(AtomicFile, WritesTheWholeContentAndLeavesNoTemporary) {
  const auto dir = fresh_dir("whole");
  const std::string bytes("a\0b\nc", 5);
  write_file_atomically((dir / "out.bin").string(), bytes);
  EXPECT_EQ(read_file(dir / "out.bin"), bytes);
  EXPECT_THAT(names_in(dir), UnorderedElementsAre("out.bin"));
  write_file_atomically((dir / "out.bin").string(), "");
  EXPECT_EQ(read_file(dir / "out.bin"), "");
}

TEST(AtomicFile, TheDestinationChangesOnlyAtCommit) {
  const auto dir = fresh_dir("commit");
  const auto path = dir / "report.json";
  write_text(path, "old");
  {
    AtomicFileWriter file(path.string());
    file.stream() << "new content";
    file.stream().flush();
    EXPECT_EQ(read_file(path), "old") << "written, not committed";
    EXPECT_EQ(names_in(dir).size(), 2u) << "the temporary beside it";
    file.commit();
    EXPECT_EQ(read_file(path), "new content");
    EXPECT_THROW(file.commit(), Error);
  }
  EXPECT_THAT(names_in(dir), UnorderedElementsAre("report.json"));
}

TEST(AtomicFile, AWriterDroppedBeforeCommitLeavesTheOldFile) {
  const auto dir = fresh_dir("dropped");
  const auto path = dir / "model.safetensors";
  write_text(path, "old");
  {
    AtomicFileWriter file(path.string());
    file.stream() << "half of a new fi";
  }
  EXPECT_EQ(read_file(path), "old");
  EXPECT_THAT(names_in(dir), UnorderedElementsAre("model.safetensors"));
}

TEST(AtomicFile, AFolderThatCannotTakeTheFileIsAnErrorNamingIt) {
  const auto dir = fresh_dir("missing");
  const auto path = (dir / "no" / "such" / "x.json").string();
  try {
    write_file_atomically(path, "x");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
  EXPECT_TRUE(names_in(dir).empty());
}

TEST(AtomicFile, OnlyTheTemporariesOfWritersThatAreGoneAreRemoved) {
  const auto dir = fresh_dir("abandoned");
  // A process that has exited (and been reaped): its pid is no longer in use.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const auto dead = std::to_string(child), self = std::to_string(::getpid());
  for (const auto& name : {"checkpoint.safetensors.tmp-" + dead + "-0",
                           "metrics.csv.tmp-" + dead + "-3", "model.safetensors.tmp-" + self + "-1",
                           std::string("model.safetensors.tmp-1-0"),  // init: alive
                           std::string("notes.tmp"), std::string("metrics.csv")}) {
    write_text(dir / name, "x");
  }
  EXPECT_EQ(remove_abandoned_temporaries(dir.string()), 2);
  EXPECT_THAT(names_in(dir),
              UnorderedElementsAre("model.safetensors.tmp-" + self + "-1",
                                   "model.safetensors.tmp-1-0", "notes.tmp", "metrics.csv"));
  EXPECT_EQ(remove_abandoned_temporaries((dir / "missing").string()), 0);
}

}  // namespace test_atomic_file
}  // namespace attnzoo::io
