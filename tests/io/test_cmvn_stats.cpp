// The readers of CMVN statistics (io/cmvn_stats.h) and of NumPy's .npy and .npz (io/npy_format.h).
// The reference: WeNet's own global_cmvn buffers in the shipped WeNet experiment folders
// (tests/models/data/wenet_u2, computed by WeNet's load_cmvn from the folder's global_cmvn), and
// the files NumPy itself wrote (tests/fuzz/corpus/cmvn_stats, make_cmvn_stats_seeds.py: one set of
// sums in every form, so every form must give the statistics of the Kaldi text). Then what is
// refused, by name.
#include <attnzoo/core/error.h>
#include <attnzoo/io/cmvn_stats.h>
#include <attnzoo/io/npy_format.h>
#include <attnzoo/io/weights_file.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnzoo {
namespace test_cmvn_stats {

using testing::error_of;
using ::testing::HasSubstr;
using testing::Scratch;
using testing::write_file;

const std::string kWenetDir = std::string(ATTNZOO_MODELS_DATA_DIR) + "/wenet_u2";
const std::string kSeeds = ATTNZOO_CMVN_SEEDS_DIR;

TEST(CmvnStats, KaldiTextAndJsonGiveWenetsBuffers) {
  // The U2 folder's global_cmvn is Kaldi text, the U2++ folder's WeNet's JSON.
  for (const auto& [model, format] : {std::pair{"u2", io::CmvnStatsFormat::kKaldiText},
                                      std::pair{"u2pp", io::CmvnStatsFormat::kWenetJson}}) {
    SCOPED_TRACE(model);
    const auto dir = kWenetDir + "/" + model;
    const auto weights = io::load_weights_file(dir + "/final.pt");
    const auto* mean = weights.tensors.find("encoder.global_cmvn.mean");
    const auto* istd = weights.tensors.find("encoder.global_cmvn.istd");
    ASSERT_TRUE(mean && istd);
    const auto stats = io::load_cmvn_stats(dir + "/global_cmvn");
    EXPECT_EQ(stats.format, format);
    EXPECT_EQ(stats.frames, 4000.0);
    // WeNet computes in float64 and stores float32: the same float32 values.
    const auto as_float = [](const std::vector<double>& v) {
      return torch::tensor(v, torch::kDouble).to(torch::kFloat);
    };
    EXPECT_TRUE(torch::equal(as_float(stats.mean), *mean));
    EXPECT_TRUE(torch::equal(as_float(stats.istd), *istd));
  }
}

TEST(CmvnStats, EveryFormNumpyWroteIsTheKaldiText) {
  const auto kaldi = io::load_cmvn_stats(kSeeds + "/kaldi.txt");
  ASSERT_EQ(kaldi.mean.size(), 3u);
  EXPECT_EQ(kaldi.frames, 4.0);
  EXPECT_DOUBLE_EQ(kaldi.mean[0], 10.5 / 4);
  for (const auto& [file, format] : {std::pair{"wenet.json", io::CmvnStatsFormat::kWenetJson},
                                     std::pair{"feats_stats.npz", io::CmvnStatsFormat::kEspnetNpz},
                                     std::pair{"compressed.npz", io::CmvnStatsFormat::kEspnetNpz},
                                     std::pair{"kaldi.npy", io::CmvnStatsFormat::kNpy}}) {
    SCOPED_TRACE(file);
    const auto stats = io::load_cmvn_stats(kSeeds + "/" + file);
    EXPECT_EQ(stats.format, format);
    EXPECT_EQ(stats.frames, kaldi.frames);
    EXPECT_EQ(stats.mean, kaldi.mean);
    EXPECT_EQ(stats.istd, kaldi.istd);
  }
}

TEST(Npy, FortranOrderIsReadInCOrder) {
  const io::FileSource file(kSeeds + "/fortran_i4.npy");
  const auto header = io::parse_npy_header(file);
  EXPECT_TRUE(header.fortran_order);
  EXPECT_EQ(header.kind, 'i');
  EXPECT_EQ(header.itemsize, 4);
  EXPECT_EQ(header.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(io::read_npy_values(file, header), (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// An .npy of `header` (padded as NumPy pads it) and `data`.
std::string npy(const std::string& header, const std::string& data) {
  std::string text = header;
  while ((10 + text.size() + 1) % 64 != 0) text += ' ';
  text += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(text.size() & 0xff);
  out += static_cast<char>(text.size() >> 8);
  return out + text + data;
}

TEST(Npy, RefusesWhatItDoesNotReadByName) {
  const auto refusal = [](const std::string& bytes) {
    const io::MemorySource source(bytes.data(), bytes.size(), "stats.npy");
    return error_of<CheckpointError>([&] {
      const auto header = io::parse_npy_header(source);
      (void)io::read_npy_values(source, header);
    });
  };
  const std::string eight(8, '\0');
  EXPECT_THAT(refusal(npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", eight)),
              HasSubstr("type '|O' is not read"));
  EXPECT_THAT(refusal(npy("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", eight)),
              HasSubstr("big-endian"));
  EXPECT_THAT(
      refusal(npy("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }", eight)),
      HasSubstr("structured arrays"));
  EXPECT_THAT(refusal(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", eight)),
              HasSubstr("needs 2 elements of 8 bytes, and the file holds 8 bytes"));
  EXPECT_THAT(refusal(npy("{'descr': '<f8', 'fortran_order': False, 'shape': "
                          "(4294967296, 4294967296, 4294967296), }",
                          eight)),
              HasSubstr("overflows"));
  EXPECT_THAT(refusal(npy("{'descr': '<f8', 'shape': (1,), }", eight)),
              HasSubstr("lacks 'descr', 'fortran_order' or 'shape'"));
  EXPECT_THAT(refusal(npy("__import__('os')", eight)), HasSubstr("expected '{'"));
  EXPECT_THAT(refusal("\x93NUMPY\x01"), HasSubstr("stats.npy: truncated"));
  // Accepted: a 0-d float32 and an int64 vector.
  const std::string one_f4("\x00\x00\x80\x3f", 4);
  const std::string bytes = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", one_f4);
  const io::MemorySource scalar(bytes.data(), bytes.size(), "scalar.npy");
  EXPECT_EQ(io::read_npy_values(scalar, io::parse_npy_header(scalar)), std::vector<double>{1.0});
}

TEST(CmvnStats, RefusesBadStatisticsNamingTheFile) {
  Scratch scratch;
  const auto refusal = [&](const std::string& name, const std::string& bytes) {
    write_file(scratch.path(name), bytes);
    return error_of<CheckpointError>([&] { (void)io::load_cmvn_stats(scratch.path(name)); });
  };
  EXPECT_THAT(refusal("binary", std::string("\0BFM ", 5)), HasSubstr("binary"));
  EXPECT_THAT(refusal("zero", " [ 1 2 0 \n 3 4 0 ]"),
              HasSubstr("zero: CMVN statistics over 0 frames (need a positive count)"));
  EXPECT_THAT(refusal("words", "[ 1 x 2 \n 3 4 0 ]"), HasSubstr("'x' (word 3) is not a number"));
  EXPECT_THAT(refusal("odd", "[ 1 2 3 ]"), HasSubstr("not Kaldi's CMVN statistics"));
  EXPECT_THAT(refusal("lengths.json", R"({"mean_stat": [1, 2], "var_stat": [3], "frame_num": 2})"),
              HasSubstr("2 sums and 1 sums of squares"));
  EXPECT_THAT(refusal("nan.json", R"({"mean_stat": [1], "var_stat": ["a"], "frame_num": 2})"),
              HasSubstr("'var_stat' holds a non-number"));
  EXPECT_THAT(
      refusal("truncated.npz", testing::read_file(kSeeds + "/feats_stats.npz").substr(0, 300)),
      HasSubstr("truncated.npz"));
  EXPECT_THAT(
      refusal("huge.json", R"({"mean_stat": [1e300], "var_stat": [1], "frame_num": 1e-300})"),
      HasSubstr("feature 0 give a mean or variance beyond float64's range"));
  // A zero variance is floored at 1e-20 as WeNet and ESPnet floor it.
  write_file(scratch.path("constant"), "[ 2 4 2 \n 2 8 0 ]");
  const auto constant = io::load_cmvn_stats(scratch.path("constant"));
  EXPECT_EQ(constant.istd, (std::vector<double>{1e10, 1e10}));
}

}  // namespace test_cmvn_stats
}  // namespace attnzoo
