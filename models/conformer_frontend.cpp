#include <attnzoo/models/conformer_frontend.h>

#include <attnzoo/layers/attention.h>  // shape_string

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>

#include <algorithm>

namespace attnzoo {

// ---------------------------------------------------------------------------------------------

GlobalCmvnImpl::GlobalCmvnImpl(int64_t num_features_) : num_features(num_features_) { reset(); }

void GlobalCmvnImpl::reset() {
  TORCH_CHECK_VALUE(num_features > 0, "GlobalCmvn: num_features must be > 0, got ", num_features);
  mean = register_buffer("mean", torch::zeros({num_features}));
  istd = register_buffer("istd", torch::ones({num_features}));
}

torch::Tensor GlobalCmvnImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK_VALUE(x.dim() == 3 && x.size(2) == num_features,
                    "GlobalCmvn: x must be [B, T, F = ", num_features, "], got ",
                    shape_string(x.sizes()));
  return (x - mean.to(x.scalar_type())) * istd.to(x.scalar_type());
}

// ---------------------------------------------------------------------------------------------

const char* to_string(Subsampling kind) {
  switch (kind) {
    case Subsampling::kNone:
      return "none";
    case Subsampling::kConv2d4:
      return "conv2d4";
    case Subsampling::kConv2d6:
      return "conv2d6";
    case Subsampling::kConv2d8:
      return "conv2d8";
    case Subsampling::kDwStriding8:
      return "dw_striding8";
    case Subsampling::kDwStriding4:
      return "dw_striding4";
    case Subsampling::kStriding4:
      return "striding4";
    case Subsampling::kStriding8:
      return "striding8";
    case Subsampling::kCausalDwStriding8:
      return "causal_dw_striding8";
    case Subsampling::kCausalDwStriding4:
      return "causal_dw_striding4";
    case Subsampling::kCausalStriding4:
      return "causal_striding4";
    case Subsampling::kCausalStriding8:
      return "causal_striding8";
    case Subsampling::kVggnet4:
      return "vggnet4";
    case Subsampling::kVggnet8:
      return "vggnet8";
  }
  return "?";
}

int64_t subsampled_length(const std::vector<ConformerSubsamplingImpl::Step>& steps,
                          int64_t frames) {
  int64_t length = frames;
  for (const auto& s : steps) {
    if (s.pool) {
      // Ceil mode: every window that starts within the input, partial ones included.
      if (length < 1) return 0;
      length = (std::max<int64_t>(length - s.kernel, 0) + s.stride - 1) / s.stride + 1;
      continue;
    }
    const int64_t span = length + s.pad_before + s.pad_after - s.kernel;
    if (span < 0) return 0;
    length = span / s.stride + 1;
  }
  return length;
}

ConformerSubsamplingImpl::ConformerSubsamplingImpl(ConformerSubsamplingOptions options_)
    : options(std::move(options_)) {
  reset();
}

void ConformerSubsamplingImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.kind() != Subsampling::kNone,
                    "ConformerSubsampling: kind none builds no module; expected conv2d4, conv2d6, "
                    "conv2d8, dw_striding4, dw_striding8, striding4, striding8, a causal_ kind, "
                    "vggnet4 or vggnet8");
  TORCH_CHECK_VALUE(o.input_dim() > 0 && o.output_dim() > 0 && o.channels() >= 0,
                    "ConformerSubsampling: input_dim and output_dim must be > 0 and channels >= 0, "
                    "got ",
                    o.input_dim(), ", ", o.output_dim(), ", ", o.channels());
  const int64_t c = o.channels() > 0 ? o.channels() : o.output_dim();
  conv = register_module("conv", torch::nn::ModuleList());
  steps = conformer_subsampling_steps(o.kind());
  // The Sequential's layout: a ReLU after each convolution, except after a depthwise one (its
  // pointwise partner follows directly). Symmetric padding is the convolution's own; forward()
  // pads asymmetric (causal) steps itself.
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    if (s.pool) {
      conv->push_back(torch::nn::MaxPool2d(
          torch::nn::MaxPool2dOptions(s.kernel).stride(s.stride).ceil_mode(true)));
      continue;
    }
    const int64_t in = i == 0 ? 1 : c;
    conv->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, c, s.kernel)
                                          .stride(s.stride)
                                          .padding(s.pad_before == s.pad_after ? s.pad_before : 0)
                                          .groups(s.depthwise ? c : 1)));
    if (!s.depthwise) conv->push_back(torch::nn::ReLU());
  }
  const int64_t frequencies = subsampled_length(steps, o.input_dim());
  TORCH_CHECK_VALUE(frequencies > 0, "ConformerSubsampling: ", to_string(o.kind()),
                    " needs at least ", min_frames(), " input features, got input_dim ",
                    o.input_dim());
  out = register_module("out", torch::nn::Linear(c * frequencies, o.output_dim()));
}

std::vector<ConformerSubsamplingImpl::Step> conformer_subsampling_steps(Subsampling kind) {
  using Step = ConformerSubsamplingImpl::Step;
  switch (kind) {
    case Subsampling::kNone:
      return {};
    case Subsampling::kConv2d4:
      return {Step{3, 2, 0, 0}, Step{3, 2, 0, 0}};
    case Subsampling::kConv2d6:
      return {Step{3, 2, 0, 0}, Step{5, 3, 0, 0}};
    case Subsampling::kConv2d8:
      return {Step{3, 2, 0, 0}, Step{3, 2, 0, 0}, Step{3, 2, 0, 0}};
    case Subsampling::kDwStriding8:
      // Conv(3, 2, pad 1), then twice [depthwise Conv(3, 2, pad 1), pointwise Conv(1)].
      return {Step{3, 2, 1, 1}, Step{3, 2, 1, 1, true}, Step{1, 1, 0, 0}, Step{3, 2, 1, 1, true},
              Step{1, 1, 0, 0}};
    case Subsampling::kDwStriding4:
      return {Step{3, 2, 1, 1}, Step{3, 2, 1, 1, true}, Step{1, 1, 0, 0}};
    case Subsampling::kStriding4:
      return {Step{3, 2, 1, 1}, Step{3, 2, 1, 1}};
    case Subsampling::kStriding8:
      return {Step{3, 2, 1, 1}, Step{3, 2, 1, 1}, Step{3, 2, 1, 1}};
    case Subsampling::kCausalDwStriding8:
      return {Step{3, 2, 2, 1}, Step{3, 2, 2, 1, true}, Step{1, 1, 0, 0}, Step{3, 2, 2, 1, true},
              Step{1, 1, 0, 0}};
    case Subsampling::kCausalDwStriding4:
      return {Step{3, 2, 2, 1}, Step{3, 2, 2, 1, true}, Step{1, 1, 0, 0}};
    case Subsampling::kCausalStriding4:
      return {Step{3, 2, 2, 1}, Step{3, 2, 2, 1}};
    case Subsampling::kCausalStriding8:
      return {Step{3, 2, 2, 1}, Step{3, 2, 2, 1}, Step{3, 2, 2, 1}};
    case Subsampling::kVggnet4:
    case Subsampling::kVggnet8: {
      std::vector<Step> steps;
      for (int stage = 0; stage < (kind == Subsampling::kVggnet4 ? 2 : 3); ++stage) {
        steps.push_back(Step{3, 1, 1, 1});
        steps.push_back(Step{3, 1, 1, 1});
        steps.push_back(Step{2, 2, 0, 0, false, /*pool=*/true});
      }
      return steps;
    }
  }
  return {};
}

int64_t ConformerSubsamplingImpl::output_length(int64_t frames) const {
  return subsampled_length(steps, frames);
}

int64_t conformer_subsampling_min_frames(Subsampling kind) {
  if (kind == Subsampling::kNone) return 1;
  const auto steps = conformer_subsampling_steps(kind);
  int64_t frames = 1;
  while (subsampled_length(steps, frames) < 1) ++frames;
  return frames;
}

bool subsampling_streams(Subsampling kind) {
  const auto steps = conformer_subsampling_steps(kind);
  const auto unpadded = [](const ConformerSubsamplingImpl::Step& s) {
    return s.pad_before == 0 && s.pad_after == 0;
  };
  const auto causal = [](const ConformerSubsamplingImpl::Step& s) {
    return s.pad_before == s.kernel - 1 && s.pad_after == s.stride - 1;
  };
  return std::all_of(steps.begin(), steps.end(), unpadded) ||
         std::all_of(steps.begin(), steps.end(), causal);
}

int64_t ConformerSubsamplingImpl::min_frames() const {
  return conformer_subsampling_min_frames(options.kind());
}

int64_t ConformerSubsamplingImpl::factor() const {
  int64_t f = 1;
  for (const auto& s : steps) f *= s.stride;
  return f;
}

namespace {

// The first convolution (one input channel) as one matrix product over its k × k patches:
// [B, 1, T, F] -> [B, C, T', F'] laid out channels-last, which the next convolution reads without
// a reorder. LibTorch's direct convolution with a single input channel spends most of its time
// on memory traffic (a profile of conformer_s at 60 s: 95 ms of ~220 ms of subsampling; this form
// takes about 40 ms).
torch::Tensor single_channel_conv(torch::nn::Conv2dImpl& conv, const torch::Tensor& x) {
  const auto& o = conv.options;
  const auto kernel = *o.kernel_size(), stride = *o.stride();
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  if (o.groups() != 1 || o.in_channels() != 1 || padding == nullptr || (*o.dilation())[0] != 1 ||
      (*o.dilation())[1] != 1 || !conv.bias.defined() ||
      !std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode())) {
    return conv.forward(x);
  }
  auto input = x.select(1, 0);  // [B, T, F]
  if ((**padding)[0] > 0 || (**padding)[1] > 0) {
    input = torch::constant_pad_nd(
        input, {(**padding)[1], (**padding)[1], (**padding)[0], (**padding)[0]});
  }
  // [B, T', F', kT, kF]
  const auto patches = input.unfold(1, kernel[0], stride[0]).unfold(2, kernel[1], stride[1]);
  const int64_t batch = patches.size(0), frames = patches.size(1), bins = patches.size(2);
  const int64_t channels = o.out_channels();
  const auto y = torch::addmm(conv.bias, patches.reshape({-1, kernel[0] * kernel[1]}),
                              conv.weight.view({channels, -1}).t());  // [B·T'·F', C]
  return y.view({batch, frames, bins, channels}).permute({0, 3, 1, 2});
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> ConformerSubsamplingImpl::forward(
    const torch::Tensor& x, const torch::Tensor& lengths) {
  const auto& o = options;
  TORCH_CHECK_VALUE(x.dim() == 3 && x.size(2) == o.input_dim(),
                    "ConformerSubsampling: x must be [B, T, F = ", o.input_dim(), "], got ",
                    shape_string(x.sizes()));
  TORCH_CHECK_VALUE(x.size(1) >= min_frames(), "ConformerSubsampling: ", to_string(o.kind()),
                    " (factor ", factor(), ") needs at least ", min_frames(), " input frames, got ",
                    x.size(1));
  const int64_t batch = x.size(0);
  // Per-utterance lengths after each convolution, on the host (B values).
  auto length = lengths.defined() ? lengths.to(torch::kCPU, torch::kLong).contiguous()
                                  : torch::full({batch}, x.size(1), torch::kLong);
  // Zeroes frames t >= length (frames on dimension 2 of [B, C, T, F]).
  const auto zero_padding = [&](const torch::Tensor& y, const torch::Tensor& valid_lengths) {
    if (valid_lengths.min().item<int64_t>() >= y.size(2)) return y;  // no padding frames
    const auto t = torch::arange(y.size(2), torch::TensorOptions().device(y.device()));
    const auto valid = t.unsqueeze(0) < valid_lengths.to(y.device()).unsqueeze(1);  // [B, T]
    return y * valid.view({batch, 1, -1, 1}).to(y.scalar_type());
  };
  auto y = zero_padding(x.unsqueeze(1), length);  // [B, 1, T, F]
  size_t step = 0;
  for (const auto& module : *conv) {
    if (auto* c = module->as<torch::nn::Conv2dImpl>()) {
      const auto& s = steps[step];
      // Asymmetric (causal) padding, on frequency and time alike; symmetric padding is the
      // convolution's own.
      if (s.pad_before != s.pad_after) {
        y = torch::constant_pad_nd(y, {s.pad_before, s.pad_after, s.pad_before, s.pad_after});
      }
      y = step == 0 ? single_channel_conv(*c, y) : c->forward(y);
      ++step;
      const auto span = length + (s.pad_before + s.pad_after - s.kernel);
      length = torch::where(span >= 0, span.div(s.stride, "floor") + 1, torch::zeros_like(span));
    } else if (auto* pool = module->as<torch::nn::MaxPool2dImpl>()) {
      // Over frames that are zero beyond the valid length, after a ReLU: a partial window's
      // maximum is its valid frames'.
      y = pool->forward(y);
      const auto& s = steps[step++];
      length = torch::where(
          length >= 1,
          (length - s.kernel).clamp_min(0).add(s.stride - 1).div(s.stride, "floor") + 1,
          torch::zeros_like(length));
    } else {
      y = module->as<torch::nn::ReLUImpl>()->forward(y);
      // After the activation: frames beyond the valid length hold bias and padding, which the
      // next (padded) convolution would reach.
      y = zero_padding(y, length);
    }
  }
  // [B, C, T', F'] -> [B, T', C·F'] (channels major, as WeNet's and NeMo's view).
  y = y.transpose(1, 2).reshape({batch, y.size(2), -1});
  return {out(y), length.to(x.device())};
}

}  // namespace attnzoo
