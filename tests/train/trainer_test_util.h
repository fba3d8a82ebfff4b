// Synthetic labelled data for the trainer's tests, written to a temporary folder: striped images
// whose class is the stripes' direction, and tones whose class is the pitch.
#pragma once

#include "common/test_util.h"

#include <attnzoo/io/safetensors.h>
#include <attnzoo/train/metrics_writer.h>
#include <attnzoo/train/trainer.h>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace attnzoo::testing {

inline std::vector<int64_t> values(const torch::Tensor& t) {
  const auto c = t.to(torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Class 0: horizontal stripes, 1: vertical, 2: diagonal; random period, phase, colours and noise.
inline cv::Mat stripes(int label, std::mt19937& rng, int size = 40) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double period = 5.0 + 6.0 * u(rng), phase = 6.3 * u(rng);
  // Light stripes on dark, in random tints.
  const double light = 170 + 85 * u(rng), dark = 60 * u(rng);
  const cv::Vec3d a(light, light - 40 * u(rng), light - 40 * u(rng));
  const cv::Vec3d b(dark, dark + 30 * u(rng), dark + 30 * u(rng));
  std::normal_distribution<double> noise(0.0, 12.0);
  cv::Mat image(size, size, CV_8UC3);
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      const double t = label == 0 ? y : label == 1 ? x : (x + y) / std::sqrt(2.0);
      const double w = 0.5 + 0.5 * std::sin(2.0 * M_PI * t / period + phase);
      for (int c = 0; c < 3; ++c) {
        image.at<cv::Vec3b>(y, x)[c] =
            cv::saturate_cast<uchar>(w * a[c] + (1 - w) * b[c] + noise(rng));
      }
    }
  }
  return image;
}

// An image folder: root/{horizontal,vertical,diagonal}/NNN.png, `per_class` each.
inline void write_stripes_folder(const std::string& root, int per_class, unsigned seed) {
  std::mt19937 rng(seed);
  const char* names[] = {"diagonal", "horizontal", "vertical"};  // sorted: labels 0, 1, 2
  const int kinds[] = {2, 0, 1};
  for (int c = 0; c < 3; ++c) {
    const auto dir = std::filesystem::path(root) / names[c];
    std::filesystem::create_directories(dir);
    for (int i = 0; i < per_class; ++i) {
      char file[32];
      std::snprintf(file, sizeof(file), "%03d.png", i);
      cv::imwrite((dir / file).string(), stripes(kinds[c], rng));
    }
  }
}

// `samples` (clamped to [-1, 1]) as 16-bit PCM: each one times 32767, rounded.
inline void write_wav16(const std::string& path, const std::vector<float>& samples, int rate) {
  const auto x = torch::tensor(samples, torch::kDouble).clamp(-1.0, 1.0) * (32767.0 / 32768.0);
  write_wav16(path, x, static_cast<int64_t>(rate));
}

// The cells of each line of a CSV text (no quoting: metrics.csv's), empty cells kept.
inline std::vector<std::vector<std::string>> csv_cells(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    size_t begin = 0;
    for (size_t comma; (comma = line.find(',', begin)) != std::string::npos; begin = comma + 1) {
      cells.push_back(line.substr(begin, comma - begin));
    }
    cells.push_back(line.substr(begin));
    rows.push_back(cells);
  }
  return rows;
}

inline std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return csv_cells({std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
}

// max |a - b| over the tensors of two safetensors files holding the same names.
inline double max_weight_difference(const std::string& a, const std::string& b) {
  const auto wa = io::load_safetensors(a).tensors;
  const auto wb = io::load_safetensors(b).tensors;
  EXPECT_EQ(wa.size(), wb.size());
  double max_diff = 0.0;
  for (const auto& item : wa) {
    max_diff = std::max(max_diff, (item.value() - wb[item.key()]).abs().max().item<double>());
  }
  return max_diff;
}

// The metrics rows of a run trained whole and of the same run stopped and resumed.
struct ResumedRun {
  std::vector<TrainMetrics> whole;
  std::vector<TrainMetrics> head;  // until the stop
  std::vector<TrainMetrics> tail;  // from the resume
};

// Trains `whole` without a stop; then `first` stopped after `stop_at` steps and `second` resumed
// from the checkpoint written there (the two share an output folder, not whole's). Expects the
// resumed run to be the uninterrupted one: the stop writes no model.safetensors, the resume starts
// at step `stop_at`, the rows have the same steps and losses (within 1e-6), and the final weights
// are the same (within 1e-6).
inline ResumedRun expect_resume_equals_whole_run(const TrainConfig& whole, const TrainConfig& first,
                                                 const TrainConfig& second, int64_t stop_at,
                                                 const TrainerOptions& options) {
  ResumedRun run;
  Trainer a(whole, options);
  run.whole = a.run();

  auto stop = options;
  stop.stop_at_step = stop_at;
  Trainer b1(first, stop);
  run.head = b1.run();
  EXPECT_FALSE(std::filesystem::exists(b1.output_dir() + "/model.safetensors"));
  auto resume = options;
  resume.resume = b1.output_dir() + "/checkpoint.safetensors";
  Trainer b2(second, resume);
  EXPECT_EQ(b2.step(), stop_at);
  run.tail = b2.run();

  EXPECT_EQ(run.head.size() + run.tail.size(), run.whole.size());
  for (size_t i = 0; i < run.whole.size() && i < run.head.size() + run.tail.size(); ++i) {
    const auto& row = i < run.head.size() ? run.head[i] : run.tail[i - run.head.size()];
    EXPECT_EQ(row.step, run.whole[i].step);
    EXPECT_NEAR(row.loss, run.whole[i].loss, 1e-6) << "step " << row.step;
  }
  EXPECT_LE(max_weight_difference(a.output_dir() + "/model.safetensors",
                                  b2.output_dir() + "/model.safetensors"),
            1e-6);
  return run;
}

// An audio list: tones of 300, 900 or 2400 Hz (classes low, mid, high), 0.5 to 0.9 s, with noise;
// writes root/NNN.wav and root/list.txt, returns the list's path.
inline std::string write_tone_list(const std::string& root, int per_class, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> noise(0.0, 0.02);
  const char* names[] = {"high", "low", "mid"};
  const double hz[] = {2400.0, 300.0, 900.0};
  std::ofstream list(root + "/list.txt");
  list << "# tones: PATH LABEL\n";
  int k = 0;
  for (int i = 0; i < per_class; ++i) {
    for (int c = 0; c < 3; ++c, ++k) {
      const int n = static_cast<int>(16000 * (0.5 + 0.4 * u(rng)));
      const double f = hz[c] * (0.9 + 0.2 * u(rng)), amplitude = 0.1 + 0.4 * u(rng);
      std::vector<float> x(static_cast<size_t>(n));
      for (int t = 0; t < n; ++t) {
        x[static_cast<size_t>(t)] =
            static_cast<float>(amplitude * std::sin(2.0 * M_PI * f * t / 16000.0) + noise(rng));
      }
      char file[32];
      std::snprintf(file, sizeof(file), "%03d.wav", k);
      write_wav16(root + "/" + file, x, 16000);
      list << file << " " << names[c] << "\n";
    }
  }
  return root + "/list.txt";
}

}  // namespace attnzoo::testing
