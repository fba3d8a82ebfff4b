#include "tools/cli/plot.h"

#include <attnzoo/core/error.h>
#include <attnzoo/io/atomic_file.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>
#include <tuple>

namespace attnzoo::cli {
namespace {

constexpr int kFont = cv::FONT_HERSHEY_SIMPLEX;
constexpr double kTextScale = 0.5;
const cv::Scalar kBlack(0, 0, 0);
const cv::Scalar kGrid(225, 225, 225);
const cv::Scalar kAxis(90, 90, 90);

bool drawable(double x, double y, bool x_log, bool y_log) {
  return std::isfinite(x) && std::isfinite(y) && (!x_log || x > 0) && (!y_log || y > 0);
}

// Compact tick labels: 0.5, 2, 512, 16384, 1e+06 -> "1e6".
std::string tick_label(double v) {
  char buffer[32];
  if (v > 0 && (v >= 1e5 || v < 1e-3)) {
    const int exponent = static_cast<int>(std::floor(std::log10(v) + 1e-9));
    const double mantissa = v / std::pow(10.0, exponent);
    if (std::fabs(mantissa - 1.0) < 1e-6) {
      std::snprintf(buffer, sizeof(buffer), "1e%d", exponent);
    } else {
      std::snprintf(buffer, sizeof(buffer), "%.0fe%d", mantissa, exponent);
    }
  } else {
    std::snprintf(buffer, sizeof(buffer), "%g", v);
  }
  return buffer;
}

cv::Size text_size(const std::string& text, double scale = kTextScale, int thickness = 1) {
  int baseline = 0;
  return cv::getTextSize(text, kFont, scale, thickness, &baseline);
}

void put_text(cv::Mat& canvas, const std::string& text, cv::Point origin, double scale = kTextScale,
              int thickness = 1, cv::Scalar color = kBlack) {
  cv::putText(canvas, text, origin, kFont, scale, color, thickness, cv::LINE_AA);
}

// An axis: data range -> pixel range, logarithmic or linear.
struct LogAxis {
  double lo = 0, hi = 1;  // bounds (log10 of them on a log axis)
  double p0 = 0, p1 = 1;  // pixels of lo and hi
  bool log = true;
  double operator()(double v) const {
    return p0 + ((log ? std::log10(v) : v) - lo) / (hi - lo) * (p1 - p0);
  }
};

// Bounds of the finite values, padded.
std::pair<double, double> linear_bounds(const std::vector<double>& values) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const double v : values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) return {0.0, 1.0};
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    lo -= 0.5;
    hi += 0.5;
  }
  const double pad = 0.05 * (hi - lo);
  return {lo - pad, hi + pad};
}

// Ticks at multiples of 1, 2 or 5 × 10^k, about six over [lo, hi].
std::vector<double> linear_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 6.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) {
    ticks.push_back(std::fabs(v) < 1e-12 * step ? 0.0 : v);
  }
  return ticks;
}

// Log10 bounds of the positive values, padded so that points do not sit on the frame.
std::pair<double, double> log_bounds(const std::vector<double>& values) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const double v : values) {
    if (!(std::isfinite(v) && v > 0)) continue;
    lo = std::min(lo, std::log10(v));
    hi = std::max(hi, std::log10(v));
  }
  if (!std::isfinite(lo)) return {0.0, 1.0};
  if (hi - lo < 0.5) {
    const double middle = 0.5 * (lo + hi);
    lo = middle - 0.25;
    hi = middle + 0.25;
  }
  const double pad = 0.06 * (hi - lo);
  return {lo - pad, hi + pad};
}

// Major ticks (labelled) and minor ticks on a log axis spanning [lo, hi] (log10).
void decade_ticks(double lo, double hi, std::vector<double>& major, std::vector<double>& minor) {
  const bool dense = hi - lo < 2.6;  // few decades: label 1, 2, 5 of each
  for (int e = static_cast<int>(std::floor(lo)); e <= static_cast<int>(std::ceil(hi)); ++e) {
    for (int m = 1; m <= 9; ++m) {
      const double v = m * std::pow(10.0, e);
      const double lv = std::log10(v);
      if (lv < lo || lv > hi) continue;
      if (m == 1 || (dense && (m == 2 || m == 5))) {
        major.push_back(v);
      } else {
        minor.push_back(v);
      }
    }
  }
}

void draw_dashed(cv::Mat& canvas, const std::vector<cv::Point2d>& points, cv::Scalar color,
                 int thickness) {
  const double on = 10, off = 7;
  double phase = 0;  // distance into the current dash period, carried across segments
  for (size_t i = 1; i < points.size(); ++i) {
    const cv::Point2d a = points[i - 1], b = points[i];
    const double length = std::hypot(b.x - a.x, b.y - a.y);
    double t = 0;
    while (t < length) {
      const double in_period = std::fmod(phase + t, on + off);
      const double step = in_period < on ? on - in_period : on + off - in_period;
      const double t_end = std::min(length, t + step);
      if (in_period < on) {
        const auto p = a + (b - a) * (t / length);
        const auto q = a + (b - a) * (t_end / length);
        cv::line(canvas, cv::Point(cvRound(p.x), cvRound(p.y)),
                 cv::Point(cvRound(q.x), cvRound(q.y)), color, thickness, cv::LINE_AA);
      }
      t = t_end;
    }
    phase = std::fmod(phase + length, on + off);
  }
}

// Where the legend goes: inside the frame, in a corner that hides no line, when there is one;
// otherwise in a grid below the axis, so that it never covers data.
struct LegendLayout {
  bool inside = true;
  cv::Rect box;                  // the frame drawn around an inside legend
  std::vector<cv::Point> items;  // top left of each entry
};

constexpr int kLegendRow = 20, kLegendSample = 34;

// A panel's visible points, their bounds, and the axes that map them into a frame.
class PanelData {
 public:
  explicit PanelData(const PlotPanel& panel) : panel_(panel) {
    std::vector<double> xs, ys;
    for (const auto& s : panel.series) {
      for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
        if (!visible(s.x[i], s.y[i])) continue;
        xs.push_back(s.x[i]);
        ys.push_back(s.y[i]);
        distinct_x_.insert(s.x[i]);
      }
    }
    std::tie(xlo_, xhi_) = panel.x_log ? log_bounds(xs) : linear_bounds(xs);
    std::tie(ylo_, yhi_) = panel.y_log ? log_bounds(ys) : linear_bounds(ys);
  }

  bool visible(double x, double y) const { return drawable(x, y, panel_.x_log, panel_.y_log); }

  std::pair<LogAxis, LogAxis> axes(const cv::Rect& f) const {
    return {LogAxis{xlo_, xhi_, static_cast<double>(f.x), static_cast<double>(f.x + f.width),
                    panel_.x_log},
            LogAxis{ylo_, yhi_, static_cast<double>(f.y + f.height), static_cast<double>(f.y),
                    panel_.y_log}};
  }

  // Each series in canvas pixels of frame `f`; points off the log scale are dropped.
  std::vector<std::vector<cv::Point2d>> project(const cv::Rect& f) const {
    const auto [xa, ya] = axes(f);
    std::vector<std::vector<cv::Point2d>> lines;
    for (const auto& s : panel_.series) {
      std::vector<cv::Point2d> points;
      for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
        if (visible(s.x[i], s.y[i])) points.emplace_back(xa(s.x[i]), ya(s.y[i]));
      }
      lines.push_back(std::move(points));
    }
    return lines;
  }

  // The major and minor ticks of each axis.
  void ticks(std::vector<double>& x_major, std::vector<double>& x_minor,
             std::vector<double>& y_major, std::vector<double>& y_minor) const {
    if (panel_.x_ticks_at_data && !distinct_x_.empty() && distinct_x_.size() <= 12) {
      x_major.assign(distinct_x_.begin(), distinct_x_.end());
    } else if (panel_.x_log) {
      decade_ticks(xlo_, xhi_, x_major, x_minor);
    } else {
      x_major = linear_ticks(xlo_, xhi_);
    }
    if (panel_.y_log) {
      decade_ticks(ylo_, yhi_, y_major, y_minor);
    } else {
      y_major = linear_ticks(ylo_, yhi_);
    }
  }

 private:
  const PlotPanel& panel_;
  std::set<double> distinct_x_;
  double xlo_ = 0, xhi_ = 1, ylo_ = 0, yhi_ = 1;
};

// Places the legend of the `shown` series: in the first corner of `frame` that hides no line,
// else below the axis, shrinking `frame` to make room.
LegendLayout place_legend(const PanelData& data, const std::vector<const PlotSeries*>& shown,
                          int width, int left, int right, int bottom, cv::Rect& frame) {
  LegendLayout legend;
  if (shown.empty()) return legend;
  int label_width = 0;
  for (const auto* s : shown) label_width = std::max(label_width, text_size(s->label).width);
  const cv::Size size(label_width + kLegendSample + 22,
                      kLegendRow * static_cast<int>(shown.size()) + 10);
  const int x0 = frame.x + 10, x1 = frame.x + frame.width - 10 - size.width;
  const int y0 = frame.y + 10, y1 = frame.y + frame.height - 10 - size.height;
  const auto lines = data.project(frame);
  for (const cv::Point corner :
       {cv::Point(x0, y0), cv::Point(x1, y1), cv::Point(x1, y0), cv::Point(x0, y1)}) {
    const cv::Rect candidate(corner, size);
    bool hides = false;
    for (const auto& points : lines) {
      // Samples along each segment, so a line crossing the box counts, not only its markers.
      for (size_t i = 0; i < points.size() && !hides; ++i) {
        const auto& from = i ? points[i - 1] : points[i];
        for (int k = 0; k <= 24 && !hides; ++k) {
          hides = candidate.contains(from + (points[i] - from) * (k / 24.0));
        }
      }
    }
    if (!hides) {
      legend.box = candidate;
      for (size_t i = 0; i < shown.size(); ++i) {
        legend.items.push_back(corner + cv::Point(0, kLegendRow * static_cast<int>(i)));
      }
      return legend;
    }
  }
  // Entries flow left to right below the axis label, wrapping at the panel's width.
  legend.inside = false;
  std::vector<cv::Point> flow;
  int x = 0, y = 0;
  for (const auto* entry : shown) {
    const int w = text_size(entry->label).width + kLegendSample + 30;
    if (x > 0 && x + w > width - left - right) x = 0, y += kLegendRow;
    flow.emplace_back(x, y);
    x += w;
  }
  const int legend_height = y + kLegendRow + 6;
  frame.height -= legend_height + 4;
  const cv::Point origin(left, frame.y + frame.height + bottom - 4);
  for (const auto& p : flow) legend.items.push_back(origin + p);
  return legend;
}

// The grid, the ticks and their labels, and the frame.
void draw_axes(cv::Mat& canvas, const PanelData& data, const cv::Rect& frame) {
  const auto [x_axis, y_axis] = data.axes(frame);
  std::vector<double> x_major, x_minor, y_major, y_minor;
  data.ticks(x_major, x_minor, y_major, y_minor);
  const int x_base = frame.y + frame.height, y_base = frame.x;
  for (const double v : x_major) {
    const int px = cvRound(x_axis(v));
    cv::line(canvas, {px, frame.y}, {px, x_base}, kGrid, 1);
    cv::line(canvas, {px, x_base}, {px, x_base + 6}, kAxis, 1);
    const std::string label = tick_label(v);
    const auto size = text_size(label);
    put_text(canvas, label, {px - size.width / 2, x_base + 10 + size.height});
  }
  for (const double v : x_minor) {
    const int px = cvRound(x_axis(v));
    cv::line(canvas, {px, x_base}, {px, x_base + 3}, kAxis, 1);
  }
  for (const double v : y_major) {
    const int py = cvRound(y_axis(v));
    cv::line(canvas, {frame.x, py}, {frame.x + frame.width, py}, kGrid, 1);
    cv::line(canvas, {y_base - 6, py}, {y_base, py}, kAxis, 1);
    const std::string label = tick_label(v);
    const auto size = text_size(label);
    put_text(canvas, label, {y_base - 10 - size.width, py + size.height / 2});
  }
  for (const double v : y_minor) {
    const int py = cvRound(y_axis(v));
    cv::line(canvas, {y_base - 3, py}, {y_base, py}, kAxis, 1);
  }
  cv::rectangle(canvas, frame, kAxis, 1);
}

// The series' lines and markers, clipped to the frame.
void draw_series(cv::Mat& canvas, const PlotPanel& panel, const PanelData& data,
                 const cv::Rect& frame) {
  cv::Mat plot_area = canvas(frame);
  const cv::Point2d offset(frame.x, frame.y);
  const auto lines = data.project(frame);
  for (size_t j = 0; j < panel.series.size(); ++j) {
    const auto& s = panel.series[j];
    std::vector<cv::Point2d> points;
    for (const auto& p : lines[j]) points.push_back(p - offset);
    const int thickness = 2;
    if (s.dashed) {
      draw_dashed(plot_area, points, s.color, thickness);
    } else {
      for (size_t i = 1; i < points.size(); ++i) {
        cv::line(plot_area, points[i - 1], points[i], s.color, thickness, cv::LINE_AA);
      }
    }
    if (s.markers) {
      for (const auto& p : points) cv::circle(plot_area, p, 4, s.color, cv::FILLED, cv::LINE_AA);
    }
  }
}

// The title, the x label, and the y label rotated.
void draw_labels(cv::Mat& canvas, const PlotPanel& panel, const cv::Rect& frame, int bottom) {
  const auto title_size = text_size(panel.title, 0.6, 1);
  put_text(canvas, panel.title, {(canvas.cols - title_size.width) / 2, 26}, 0.6, 1);
  const auto x_label_size = text_size(panel.x_label);
  put_text(
      canvas, panel.x_label,
      {frame.x + (frame.width - x_label_size.width) / 2, frame.y + frame.height + bottom - 12});
  if (!panel.y_label.empty()) {
    const auto size = text_size(panel.y_label);
    cv::Mat label(size.height + 8, size.width + 4, CV_8UC3, cv::Scalar(255, 255, 255));
    put_text(label, panel.y_label, {2, size.height + 2});
    cv::Mat rotated;
    cv::rotate(label, rotated, cv::ROTATE_90_COUNTERCLOCKWISE);
    const int y0 = std::max(0, frame.y + (frame.height - rotated.rows) / 2);
    const int rows = std::min(rotated.rows, canvas.rows - y0);
    rotated(cv::Rect(0, 0, rotated.cols, rows)).copyTo(canvas(cv::Rect(6, y0, rotated.cols, rows)));
  }
}

void draw_legend(cv::Mat& canvas, const LegendLayout& legend,
                 const std::vector<const PlotSeries*>& shown) {
  if (shown.empty()) return;
  if (legend.inside) {
    cv::rectangle(canvas, legend.box, cv::Scalar(255, 255, 255), cv::FILLED);
    cv::rectangle(canvas, legend.box, kAxis, 1);
  }
  for (size_t i = 0; i < shown.size(); ++i) {
    const int x = legend.items[i].x, y = legend.items[i].y + 15;
    const cv::Point2d a(x + 8, y), b(x + 8 + kLegendSample, y);
    if (shown[i]->dashed) {
      draw_dashed(canvas, {a, b}, shown[i]->color, 2);
    } else {
      cv::line(canvas, a, b, shown[i]->color, 2, cv::LINE_AA);
    }
    if (shown[i]->markers) {
      cv::circle(canvas, (a + b) * 0.5, 4, shown[i]->color, cv::FILLED, cv::LINE_AA);
    }
    put_text(canvas, shown[i]->label, {x + 14 + kLegendSample, y + 5});
  }
}

}  // namespace

cv::Mat render_log_log_panel(const PlotPanel& panel, int width, int height) {
  cv::Mat canvas(height, width, CV_8UC3, cv::Scalar(255, 255, 255));
  const int left = 86, right = 18, top = 40, bottom = 58;
  const PanelData data(panel);
  std::vector<const PlotSeries*> shown;
  for (const auto& s : panel.series) {
    if (!s.label.empty()) shown.push_back(&s);
  }
  cv::Rect frame(left, top, width - left - right, height - top - bottom);
  const LegendLayout legend = place_legend(data, shown, width, left, right, bottom, frame);
  draw_axes(canvas, data, frame);
  draw_series(canvas, panel, data, frame);
  draw_labels(canvas, panel, frame, bottom);
  draw_legend(canvas, legend, shown);
  return canvas;
}

cv::Scalar plot_color(size_t index) {
  // Okabe–Ito's colour-blind safe palette (BGR), without its yellow (poor on white).
  static const cv::Scalar kPalette[] = {
      {178, 114, 0},    // blue
      {0, 94, 213},     // vermillion
      {115, 158, 0},    // bluish green
      {167, 121, 204},  // reddish purple
      {0, 159, 230},    // orange
      {233, 180, 86},   // sky blue
      {40, 40, 40},     // near black
  };
  return kPalette[index % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

void write_log_log_plot(const std::vector<PlotPanel>& panels, const std::string& path,
                        int panel_width, int panel_height) {
  if (panels.empty()) throw std::invalid_argument("plot: no panels to write");
  std::vector<cv::Mat> rendered;
  for (const auto& panel : panels) {
    rendered.push_back(render_log_log_panel(panel, panel_width, panel_height));
  }
  cv::Mat canvas;
  cv::hconcat(rendered, canvas);
  write_png(canvas, path);
}

void write_png(const cv::Mat& image, const std::string& path) {
  std::vector<uchar> bytes;
  bool encoded = false;
  try {
    encoded = cv::imencode(".png", image, bytes);
  } catch (const cv::Exception&) {
    encoded = false;
  }
  if (!encoded) throw Error(path + ": cannot encode the PNG");
  io::write_file_atomically(path, {reinterpret_cast<const char*>(bytes.data()), bytes.size()});
}

}  // namespace attnzoo::cli
