// Small line plots as PNG, on OpenCV: panels with ticks, labels and a legend, log-log for the
// benchmark figures (cost against sequence length, to read scaling exponents off) or linear for
// training curves (loss and accuracy against steps). Not a general plotting library.
#pragma once

#include <opencv2/core.hpp>

#include <string>
#include <vector>

namespace attnzoo::cli {

struct PlotSeries {
  std::string label;
  std::vector<double> x;  // points with a non-positive or non-finite coordinate are not drawn
  std::vector<double> y;
  cv::Scalar color;  // BGR
  bool dashed = false;
  bool markers = true;
};

struct PlotPanel {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
  // Ticks on x at the series' x values (e.g. the lengths measured: 512, 1024, ...) instead of at
  // decades; used when there are at most 12 distinct values.
  bool x_ticks_at_data = true;
  // Logarithmic axes (points with a non-positive coordinate on a log axis are not drawn).
  bool x_log = true;
  bool y_log = true;
};

// The i-th colour of a qualitative palette (distinguishable, colour-blind friendly order).
cv::Scalar plot_color(size_t index);

// `image` (8-bit BGR or gray) as a PNG file, written so that it survives a kill
// (io/atomic_file.h). Throws attnzoo::Error naming the file.
void write_png(const cv::Mat& image, const std::string& path);

// One panel of width × height pixels (log-log unless the panel says otherwise).
cv::Mat render_log_log_panel(const PlotPanel& panel, int width, int height);

// The panels side by side in one PNG; throws when the file cannot be written.
void write_log_log_plot(const std::vector<PlotPanel>& panels, const std::string& path,
                        int panel_width = 720, int panel_height = 540);

}  // namespace attnzoo::cli
