// The Conformer's front end (Gulati et al. 2020, "Conformer: Convolution-augmented Transformer for
// Speech Recognition", arXiv 2005.08100, section 2 and figure 1: "convolution subsampling" before
// the blocks), in the layouts of WeNet / ESPnet and NeMo's FastConformer (Rekesh et al. 2023,
// "Fast Conformer with Linearly Scalable Attention", arXiv 2305.05084, section 3.1):
//
//   features [B, T, F] -> global CMVN -> subsampling [B, T', D] -> x·√D (+ absolute encodings)
//
// Padding never leaks: padded input frames are zeroed before the subsampling and every
// intermediate frame beyond an utterance's subsampled length is zeroed after each convolution, so
// a batch of unequal lengths computes on its valid frames what each utterance computes alone.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

namespace attnzoo {

// ---------------------------------------------------------------------------------------------
// Global CMVN (WeNet's GlobalCMVN with norm_var): x = (x − mean)·istd per feature. `mean` and
// `istd` are buffers [F] (loaded by name, never trained); they start as 0 and 1 (the identity).
class GlobalCmvnImpl : public torch::nn::Cloneable<GlobalCmvnImpl> {
 public:
  explicit GlobalCmvnImpl(int64_t num_features);
  void reset() override;
  // x: [B, T, F] -> [B, T, F]
  torch::Tensor forward(const torch::Tensor& x);

  int64_t num_features;
  torch::Tensor mean;  // [F]
  torch::Tensor istd;  // [F], 1 / standard deviation
};
TORCH_MODULE(GlobalCmvn);

// ---------------------------------------------------------------------------------------------
// Subsampling kinds (time and frequency are both subsampled; the channels × remaining frequencies
// are projected to D by `out`):
//   "conv2d4"       WeNet/ESPnet Conv2dSubsampling4: Conv2d(1, C, 3, stride 2) → ReLU →
//                   Conv2d(C, C, 3, 2) → ReLU; no padding
//   "conv2d6"       Conv2dSubsampling6: kernels 3 (stride 2) then 5 (stride 3)
//   "conv2d8"       Conv2dSubsampling8: three kernel-3 stride-2 convolutions
//   "dw_striding8"  NeMo's "dw_striding" with factor 8 (FastConformer): Conv2d(1, C, 3, 2, pad 1)
//                   → ReLU, then twice [depthwise Conv2d(C, C, 3, 2, pad 1, groups C) →
//                   pointwise Conv2d(C, C, 1) → ReLU]
//   "dw_striding4"  the same with factor 4 (one depthwise-pointwise pair)
//   "striding4"     NeMo's "striding" with factor 4: twice Conv2d(·, C, 3, 2, pad 1) → ReLU
//   "striding8"     the same three times
//   "causal_dw_striding8", "causal_dw_striding4", "causal_striding4", "causal_striding8"
//                   the same with NeMo's causal_downsampling: each stride-2 convolution pads 2
//                   frames before and 1 after (CausalConv2D: k − 1 and s − 1, on time and
//                   frequency alike) instead of 1 on each side, so an output frame j reads no input
//                   frame after factor·j (the cache-aware streaming FastConformers)
//   "vggnet4"       NeMo's "vggnet" with factor 4 (Huang et al. 2020, "Conformer-Transducer" /
//                   VGG-style): twice [Conv2d(·, C, 3, 1, pad 1) → ReLU → Conv2d(C, C, 3, 1, pad 1)
//                   → ReLU → MaxPool2d(2, 2, ceil_mode)]
//   "vggnet8"       the same three times
// Module names follow the source layouts: `conv` holds the Sequential's entries by index (conv.0,
// conv.2, ...; the ReLUs and max pools hold their places as in WeNet's and NeMo's nn.Sequential),
// `out` is the Linear(C·F', D).
//
// Output lengths follow the convolution arithmetic, per convolution L -> (L + 2p − k) / s + 1
// (floor): ((L − 1)/2 − 1)/2 for ×4, which is also the number of ones WeNet's mask subsampling
// x_mask[:, :, 2::2][:, :, 2::2] keeps (×6: [2::2][4::3], ×8: [2::2] three times), so lengths
// agree with WeNet's. Without padding (conv2d*), an output frame below that length only sees
// input frames below L: nothing leaks even without masking. With NeMo's padding 1, the last valid
// output of an odd length reaches one frame past L (zero for an utterance alone); hence the
// zeroing of frames beyond each intermediate length, which NeMo does not do (we differ from NeMo
// there only on batches with padding; an utterance alone is unaffected). The causal kinds take
// L -> L/2 + 1 per stride-2 convolution; vggnet's pools L -> ⌈L/2⌉ (ceil mode, so the last frame
// of an odd length is pooled alone: NeMo's calc_length with ceil_mode).
enum class Subsampling {
  kNone,         // "none": no subsampling (ConformerEncoderOptions only: features already D wide)
  kConv2d4,      // "conv2d4": WeNet's Conv2dSubsampling4
  kConv2d6,      // "conv2d6": WeNet's Conv2dSubsampling6
  kConv2d8,      // "conv2d8": WeNet's Conv2dSubsampling8
  kDwStriding8,  // "dw_striding8": NeMo's dw_striding, factor 8
  kDwStriding4,  // "dw_striding4": NeMo's dw_striding, factor 4
  kStriding4,    // "striding4": NeMo's striding, factor 4
  kStriding8,    // "striding8": NeMo's striding, factor 8
  kCausalDwStriding8,  // "causal_dw_striding8": NeMo's dw_striding, causal_downsampling
  kCausalDwStriding4,  // "causal_dw_striding4"
  kCausalStriding4,    // "causal_striding4": NeMo's striding, causal_downsampling
  kCausalStriding8,    // "causal_striding8"
  kVggnet4,            // "vggnet4": NeMo's vggnet, factor 4
  kVggnet8             // "vggnet8"
};
const char* to_string(Subsampling kind);

struct ConformerSubsamplingOptions {
  ConformerSubsamplingOptions(Subsampling kind, int64_t input_dim, int64_t output_dim)
      : kind_(kind), input_dim_(input_dim), output_dim_(output_dim) {}
  TORCH_ARG(Subsampling, kind);
  TORCH_ARG(int64_t, input_dim);   // F
  TORCH_ARG(int64_t, output_dim);  // D
  // Convolution channels C; 0: D (WeNet's choice; NeMo's conv_channels is separate).
  TORCH_ARG(int64_t, channels) = 0;
};

class ConformerSubsamplingImpl : public torch::nn::Cloneable<ConformerSubsamplingImpl> {
 public:
  explicit ConformerSubsamplingImpl(ConformerSubsamplingOptions options);
  void reset() override;
  // x: [B, T, F], lengths: [B] integral in [0, T] (undefined: all T) -> (y [B, T', D],
  // lengths' [B] on x's device). T must be at least min_frames(); each length L becomes
  // output_length(L).
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x,
                                                   const torch::Tensor& lengths);

  int64_t output_length(int64_t frames) const;
  // The fewest input frames that give one output frame.
  int64_t min_frames() const;
  int64_t factor() const;

  // One Conv2d of the stack: square kernel, stride, and the zeros padded before and after on
  // both axes (for the length arithmetic); depthwise (groups = channels) or not. The first takes
  // 1 channel, the others C. Or, with `pool`, a MaxPool2d of that kernel and stride in ceil mode
  // (no padding).
  struct Step {
    int64_t kernel, stride, pad_before, pad_after;
    bool depthwise = false;
    bool pool = false;
  };

  ConformerSubsamplingOptions options;
  std::vector<Step> steps;  // in order, one per Conv2d or MaxPool2d of `conv`
  torch::nn::ModuleList conv{nullptr};
  torch::nn::Linear out{nullptr};  // [D, C·F']
};
TORCH_MODULE(ConformerSubsampling);

// Output length of a stack of steps for an input of `frames` frames (0 when too short).
int64_t subsampled_length(const std::vector<ConformerSubsamplingImpl::Step>& steps, int64_t frames);

// The Conv2d steps of a subsampling kind, in order (what ConformerSubsampling builds); throws for
// an unknown kind. The frequency axis goes through the same arithmetic as time.
std::vector<ConformerSubsamplingImpl::Step> conformer_subsampling_steps(Subsampling kind);

// The fewest input frames that a subsampling of `kind` (kNone: 1) turns into one output frame.
int64_t conformer_subsampling_min_frames(Subsampling kind);

// Whether chunks of input frames give the output frames of the whole utterance: no step pads
// (none, conv2d*), or every step pads causally (k − 1 before, s − 1 after: the causal_ kinds,
// whose chunks recompute a few earlier output frames; ConformerEncoderImpl::stream_lead).
bool subsampling_streams(Subsampling kind);

}  // namespace attnzoo
