// `attnzoo demo`: the shared attention layer at work on a sequence whose structure is known, so
// that what it prints can be checked by eye and by the assertions it makes itself.
//
// Tokens are sinusoidal position codes (Vaswani et al. 2017, section 3.5, with frequencies spaced
// geometrically from 1 down to 1/length rather than to 1/10000, so every head sees a useful range)
// and the layer's q and k projections are scaled identities, so token i attends to the tokens whose
// codes resemble its own: a band around the diagonal whose width follows the frequencies each head
// sees (fast frequencies in the first heads: narrow bands; slow ones in the last: wide bands). A
// batch of three sequences exercises key padding: the second one is padded, the third has no valid
// key.
#include "tools/cli/commands.h"
#include "tools/cli/plot.h"

#include <attnzoo/core/error.h>
#include <attnzoo/layers/attention.h>

#include <torch/torch.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>

namespace attnzoo::cli {
namespace {

struct DemoOptions {
  int64_t length = 48;
  int64_t dim = 128;
  int64_t heads = 4;
  double sharpness = 1.0;
  std::string png;
  bool causal = false;
};

// [L, D] sinusoidal position codes, dims ordered from the fastest frequency (1) to the slowest
// (1/L).
torch::Tensor position_codes(int64_t length, int64_t dim) {
  const auto position = torch::arange(length, torch::kDouble).unsqueeze(1);
  const auto index = torch::arange(dim / 2, torch::kDouble);
  const auto frequency =
      torch::exp(-std::log(static_cast<double>(length)) * 2.0 * index / static_cast<double>(dim));
  const auto angle = position * frequency.unsqueeze(0);
  // Interleave sin and cos so that every head's slice holds whole (sin, cos) pairs.
  return torch::stack({torch::sin(angle), torch::cos(angle)}, -1)
      .reshape({length, dim})
      .to(torch::kFloat);
}

// Renders per-head maps [H, L, S] as one PNG: heads side by side, viridis, 6 px per cell.
void write_head_maps(const torch::Tensor& maps, const std::string& path) {
  const int64_t heads = maps.size(0), rows = maps.size(1), cols = maps.size(2);
  const int cell = 6, gap = 12, label = 22;
  cv::Mat canvas(static_cast<int>(rows * cell + label),
                 static_cast<int>(heads * (cols * cell + gap)), CV_8UC3, cv::Scalar(255, 255, 255));
  for (int64_t h = 0; h < heads; ++h) {
    // Each head scaled to its own maximum, so narrow and wide bands are both visible.
    auto head = maps[h].to(torch::kFloat).contiguous();
    head = head / head.max().clamp_min(1e-12);
    cv::Mat gray(static_cast<int>(rows), static_cast<int>(cols), CV_32F, head.data_ptr<float>());
    cv::Mat bytes, color, big;
    gray.convertTo(bytes, CV_8U, 255.0);
    cv::applyColorMap(bytes, color, cv::COLORMAP_VIRIDIS);
    cv::resize(color, big, cv::Size(), cell, cell, cv::INTER_NEAREST);
    const int x = static_cast<int>(h * (cols * cell + gap));
    big.copyTo(canvas(cv::Rect(x, label, big.cols, big.rows)));
    cv::putText(canvas, "head " + std::to_string(h), cv::Point(x, 16), cv::FONT_HERSHEY_SIMPLEX,
                0.5, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
  }
  write_png(canvas, path);
}

// One row of characters per query, darker = more weight; the first `width` keys.
void print_ascii(const torch::Tensor& map, int64_t width) {
  static const char kShades[] = " .:-=+*#%@";
  const auto m = map.to(torch::kDouble);
  const double top = m.max().item<double>();
  for (int64_t i = 0; i < std::min<int64_t>(m.size(0), width); ++i) {
    std::string line = "    ";
    for (int64_t j = 0; j < std::min<int64_t>(m.size(1), width); ++j) {
      const double v = m[i][j].item<double>() / top;
      line += kShades[std::min(9, static_cast<int>(v * 9.999))];
    }
    std::cout << line << "\n";
  }
}

int run_demo(const DemoOptions& o) {
  TORCH_CHECK_VALUE(o.length >= 2, "--length must be >= 2, got ", o.length);
  TORCH_CHECK_VALUE(o.dim >= 2 && o.dim % 2 == 0, "--dim must be even and >= 2, got ", o.dim);
  TORCH_CHECK_VALUE(o.heads >= 1 && o.dim % o.heads == 0 && (o.dim / o.heads) % 2 == 0,
                    "--heads must divide --dim into even head widths, got dim ", o.dim,
                    " and heads ", o.heads);
  torch::NoGradGuard no_grad;
  const int64_t length = o.length, dim = o.dim;
  MultiheadAttention layer(MultiheadAttentionOptions(dim, o.heads).backend("math"));
  layer->eval();
  {
    // q = k = sharpness·x, v = x, output projection = identity, no biases.
    const auto eye = torch::eye(dim);
    layer->qkv->weight.copy_(torch::cat({o.sharpness * eye, o.sharpness * eye, eye}, 0));
    layer->qkv->bias.zero_();
    layer->proj->weight.copy_(eye);
    layer->proj->bias.zero_();
  }
  const auto codes = position_codes(length, dim);
  const auto x = codes.unsqueeze(0).expand({3, length, dim});
  const int64_t padded_length = (2 * length) / 3;
  auto mask = AttentionMask().key_lengths(torch::tensor({length, padded_length, int64_t{0}}));
  if (o.causal) mask.causal();

  std::cout << "attnzoo demo: self-attention over " << length
            << " sinusoidal position codes (D=" << dim << ", H=" << o.heads
            << ", head_dim=" << layer->head_dim() << "), batch of 3"
            << " with key lengths [" << length << ", " << padded_length << ", 0]"
            << (o.causal ? ", causal" : "") << "\n\n";

  const auto reference = layer->forward_with_weights(x, {}, mask);
  bool ok = true;
  const auto check = [&](const std::string& what, double value, double limit) {
    const bool pass = value <= limit;
    ok = ok && pass;
    std::printf("  %-52s %10.3g  %s\n", what.c_str(), value, pass ? "ok" : "FAILED");
  };
  std::cout << "checks (value, limit met?):\n";
  for (const auto& backend : attention_backend_names()) {
    // Approximations (linear) and restricted patterns (block_local) compute something else.
    if (!is_exact_attention_backend(backend)) continue;
    AttentionProblem probe;
    probe.query = x.unsqueeze(1);
    probe.key = probe.value = probe.query;
    probe.mask = mask;
    // flash runs on CUDA only: said, not checked.
    if (const auto why = attention_backend_unsupported_reason(backend, probe); !why.empty()) {
      std::printf("  %-52s %10s  skipped: %s\n", ("backend " + backend).c_str(), "-", why.c_str());
      continue;
    }
    layer->set_backend(backend);
    const auto out = layer(x, mask);
    check("backend " + backend + ": max |out - math|",
          (out - reference.output).abs().max().item<double>(), 1e-5);
  }
  layer->set_backend("auto");
  const auto& w = reference.weights;  // [B, H, L, S]
  check("weight on padded keys (sequence 2)",
        w[1].narrow(-1, padded_length, length - padded_length).abs().max().item<double>(), 0.0);
  check("max |1 - row sum| over valid rows",
        (w.narrow(0, 0, 2).sum(-1) - 1).abs().max().item<double>(), 1e-5);
  check("sequence 3 (no valid key): max |output|", reference.output[2].abs().max().item<double>(),
        0.0);
  // The band: the share of each query's attention within two positions of itself, per head.
  const auto distance =
      (torch::arange(length).unsqueeze(1) - torch::arange(length).unsqueeze(0)).abs();
  const auto near_share = (w[0] * (distance <= 2)).sum(-1).mean(-1);  // [H]
  std::cout << "\nshare of attention within +-2 positions, per head (sequence 1):";
  for (int64_t h = 0; h < o.heads; ++h) std::printf(" %.2f", near_share[h].item<double>());
  std::cout << "\n\nhead 0, first 24 queries x keys (sequence 1):\n";
  print_ascii(w[0][0], 24);
  if (o.heads > 1) {
    std::cout << "head " << o.heads - 1 << ":\n";
    print_ascii(w[0][o.heads - 1], 24);
  }
  if (!o.png.empty()) {
    write_head_maps(w[0], o.png);
    std::cout << "\nattention maps of sequence 1 written to " << o.png << "\n";
  }
  std::cout << (ok ? "\nall checks passed\n" : "\nSOME CHECKS FAILED\n");
  return ok ? 0 : 1;
}

}  // namespace

Command add_demo_command(CLI::App& app) {
  auto options = std::make_shared<DemoOptions>();
  auto* sub = app.add_subcommand(
      "demo", "Run the shared attention layer on a sequence of known structure and check it");
  sub->add_option("--length", options->length, "sequence length")->capture_default_str();
  sub->add_option("--dim", options->dim, "model width D")->capture_default_str();
  sub->add_option("--heads", options->heads, "number of heads")->capture_default_str();
  sub->add_option("--sharpness", options->sharpness, "gain of the q and k projections")
      ->capture_default_str();
  sub->add_flag("--causal", options->causal, "add a causal mask");
  sub->add_option("--png", options->png, "write the per-head attention maps to this PNG");
  return {sub, [options] { return run_demo(*options); }};
}

}  // namespace attnzoo::cli
