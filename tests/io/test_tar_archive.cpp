// tar archives read in C++: files written by Python's tarfile (tests/io/make_tar_reference.py) in
// each of its formats (ustar, GNU, pax), plain and gzipped (also as two gzip members), compared
// with what tarfile itself lists and reads; a checkpoint inside an archive read in place, as a
// .nemo file holds one, also through an ARCHIVE#ENTRY path; and the archives that must be refused,
// each with its message.
#include <attnzoo/core/error.h>
#include <attnzoo/io/archive_entry.h>
#include <attnzoo/io/gunzip.h>
#include <attnzoo/io/tar_archive.h>
#include <attnzoo/io/torch_checkpoint.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

#include <fstream>
#include <iterator>
#include <string>

namespace attnzoo::io {
namespace test_tar_archive {

using testing::error_of;
using ::testing::HasSubstr;

const std::string kDir = std::string(ATTNZOO_IO_REFERENCE_DIR) + "/tar/";

const nlohmann::json& manifest() {
  static const nlohmann::json m = [] {
    std::ifstream in(kDir + "manifest.json");
    if (!in) throw std::runtime_error("no " + kDir + "manifest.json: run ctest -R io.make_");
    return nlohmann::json::parse(in);
  }();
  return m;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

uint32_t crc_of(const std::string& bytes) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                     reinterpret_cast<const Bytef*>(bytes.data()),
                                     static_cast<uInt>(bytes.size())));
}

// Every archive lists the regular files tarfile lists, in its order, with the same bytes.
TEST(TarArchive, ListsAndReadsWhatPythonsTarfileWrote) {
  ASSERT_GE(manifest()["archives"].size(), 7u);
  for (const auto& [name, files] : manifest()["archives"].items()) {
    SCOPED_TRACE(name);
    const FileSource source(kDir + name);
    const TarArchive tar(source);
    EXPECT_EQ(tar.gzipped(), name.size() > 3 && name.substr(name.size() - 3) == ".gz");
    ASSERT_EQ(tar.entries().size(), files.size());
    for (size_t i = 0; i < files.size(); ++i) {
      const auto& entry = tar.entries()[i];
      EXPECT_EQ(entry.name, files[i]["name"].get<std::string>());
      EXPECT_EQ(entry.size, files[i]["size"].get<uint64_t>());
      EXPECT_EQ(crc_of(tar.read_string(entry, 1 << 20, "file")), files[i]["crc32"].get<uint32_t>());
      EXPECT_EQ(tar.find(entry.name), &entry);
      EXPECT_EQ(tar.find("./" + entry.name), &entry);
    }
    EXPECT_EQ(tar.find("no_such_file"), nullptr);
  }
}

// model_weights.ckpt read in place (plain) or from the inflated bytes (gzipped), as torch.save
// wrote it.
TEST(TarArchive, CheckpointInsideIsReadInPlace) {
  for (const std::string name : {"nemo.tar", "nemo.tar.gz"}) {
    SCOPED_TRACE(name);
    const FileSource source(kDir + name);
    const TarArchive tar(source);
    const auto* entry = tar.find("model_weights.ckpt");
    ASSERT_NE(entry, nullptr);
    const auto weights = tar.open(*entry);
    EXPECT_EQ(weights->name(), kDir + name + ":model_weights.ckpt");
    EXPECT_TRUE(is_torch_checkpoint(*weights));
    const auto checkpoint = load_torch_checkpoint(*weights);
    ASSERT_EQ(checkpoint.tensors.size(), 2u);
    for (const auto& [key, values] : manifest()["checkpoint"].items()) {
      const auto expected = torch::tensor(values.get<std::vector<double>>(), torch::kFloat);
      EXPECT_TRUE(torch::equal(checkpoint.tensors[key].flatten(), expected)) << key;
    }
    EXPECT_THAT(tar.read_string(*tar.find("model_config.yaml"), 4096, "config"),
                HasSubstr("${sample_rate}"));
    EXPECT_THAT(error_of([&] { tar.read_string(*entry, 100, "model config"); }),
                HasSubstr("'model_weights.ckpt' is 1941 bytes, more than the 100 a model config "
                          "may be"));
  }
}

TEST(TarArchive, RefusesDuplicatesAndMalformedPaxHeaders) {
  for (const auto& [name, message] : manifest()["errors"].items()) {
    SCOPED_TRACE(name);
    const FileSource source(kDir + name);
    EXPECT_THAT(error_of([&] { TarArchive{source}; }),
                HasSubstr(kDir + name + ": " + message.get<std::string>()));
  }
}

// Damage anywhere is an error naming the file: a header's checksum, a file cut inside an entry's
// data or inside a header, gzip cut short or followed by other bytes, an inflated size above the
// limit, and bytes that are not an archive at all.
TEST(TarArchive, RefusesDamagedArchives) {
  const std::string tar = bytes_of(kDir + "gnu.tar");
  const std::string gz = bytes_of(kDir + "nemo.tar.gz");
  ASSERT_GT(tar.size(), 4096u);
  auto refuse = [](std::string bytes, TarLimits limits = {}) {
    const MemorySource source(bytes.data(), bytes.size(), "damaged.tar");
    return error_of([&] { TarArchive(source, limits); });
  };
  std::string bad_checksum = tar;
  bad_checksum[0] ^= 1;  // the first header's name: its checksum no longer matches
  EXPECT_THAT(refuse(bad_checksum), HasSubstr("damaged.tar: not a tar archive"));
  std::string later_header = tar;
  later_header[1024 + 5] ^= 1;  // after the GNU long-name header and the name: the file's
  EXPECT_THAT(refuse(later_header),
              HasSubstr("damaged.tar: tar header at byte 1024: checksum mismatch"));
  EXPECT_THAT(refuse(tar.substr(0, 2048 + 1000)), HasSubstr("run past the end of the file"));
  EXPECT_THAT(refuse(tar.substr(0, 1024 + 100)), HasSubstr("the file ends inside it"));
  EXPECT_THAT(refuse(gz.substr(0, gz.size() / 2)), HasSubstr("damaged.tar: ends before its gzip"));
  EXPECT_THAT(refuse(gz + "junk"), HasSubstr("bytes after gzip member 1 are not another member"));
  std::string corrupt = gz;
  corrupt[gz.size() - 6] ^= 0x55;  // the member's CRC-32
  EXPECT_THAT(refuse(corrupt), HasSubstr("corrupt gzip data"));
  TarLimits small;
  small.max_gunzip_bytes = 4096;
  EXPECT_THAT(refuse(gz, small), HasSubstr("inflates to more than 4096 bytes (the limit"));
  EXPECT_THAT(refuse(std::string(2000, 'x')), HasSubstr("not a tar archive"));
  EXPECT_THAT(refuse(""), HasSubstr("not a tar archive"));
  TarLimits few;
  few.max_entries = 2;
  EXPECT_THAT(refuse(tar, few), HasSubstr("more than 2 files"));
}

// ARCHIVE#ENTRY names a file inside an archive wherever a file's path is asked for; an existing
// file whose name holds '#' is still that file.
TEST(TarArchive, EntryPathsReadFilesInside) {
  for (const std::string name : {"nemo.tar", "nemo.tar.gz"}) {
    SCOPED_TRACE(name);
    const auto path = archive_entry_path(kDir + name, "model_config.yaml");
    const auto split = split_archive_entry(path);
    ASSERT_TRUE(split.has_value());
    EXPECT_EQ(split->archive, kDir + name);
    EXPECT_EQ(split->entry, "model_config.yaml");
    EXPECT_TRUE(is_file_or_entry(path));
    EXPECT_THAT(read_file_or_entry(path, 4096, "config"), HasSubstr("${sample_rate}"));
    EXPECT_EQ(split_archive_entry(kDir + name + "#./model_config.yaml")->entry,
              "model_config.yaml");
    EXPECT_FALSE(is_file_or_entry(kDir + name + "#missing.yaml"));
    EXPECT_THAT(error_of([&] { read_file_or_entry(kDir + name + "#missing.yaml", 10, "config"); }),
                HasSubstr(kDir + name + ": no entry 'missing.yaml' (config)"));
    EXPECT_THAT(error_of([&] { read_file_or_entry(path, 10, "model config"); }),
                HasSubstr("more than the 10 a model config may be"));
  }
  testing::Scratch scratch;
  const auto hashed = scratch.path("a#b.txt");
  std::ofstream(hashed) << "plain";
  EXPECT_FALSE(split_archive_entry(hashed).has_value());
  EXPECT_EQ(read_file_or_entry(hashed, 100, "file"), "plain");
  EXPECT_FALSE(split_archive_entry(scratch.path("none.tar#x")).has_value());
  EXPECT_FALSE(split_archive_entry(kDir + "nemo.tar#").has_value());
  EXPECT_THAT(error_of([&] { read_file_or_entry(hashed + "#x", 100, "tokenizer"); }),
              HasSubstr(hashed + ": not a tar archive, so it holds no entry 'x' (tokenizer)"));
  EXPECT_THAT(error_of([&] { read_file_or_entry(scratch.path("none"), 100, "tokenizer"); }),
              HasSubstr("no such file (tokenizer)"));
}

TEST(Gunzip, InflatesWhatPythonCompressed) {
  const std::string gz = bytes_of(kDir + "nemo.tar.gz");
  const MemorySource source(gz.data(), gz.size(), "nemo.tar.gz");
  EXPECT_TRUE(is_gzip(source));
  EXPECT_EQ(gunzip(source, 1 << 20).size(), bytes_of(kDir + "nemo.tar").size());
  const MemorySource plain("not gzip", 8, "plain");
  EXPECT_FALSE(is_gzip(plain));
  EXPECT_THAT(error_of([&] { gunzip(plain, 100); }), HasSubstr("plain: not a gzip file"));
}

}  // namespace test_tar_archive
}  // namespace attnzoo::io
