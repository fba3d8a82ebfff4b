// Conformer encoder (Gulati et al. 2020, "Conformer: Convolution-augmented Transformer for Speech
// Recognition", arXiv 2005.08100): a stack of blocks, each a macaron of two half-step feed-forward
// modules around self-attention and a convolution module (section 2, equation 1):
//
//   x = x + ½·ffn1(x)
//   x = x + attn(attn_norm(x), key padding, positions)   (conv first when convolution_first)
//   x = x + conv(x)                                       (LayerNorm inside, padding zeroed)
//   x = x + ½·ffn2(x)
//   y = final_norm(x)
//
// The blocks take features already at the model width (torchaudio.models.Conformer's contract);
// ConformerEncoder puts the front end (models/conformer_frontend.h) in front of this stack.
// Parameter names are ours; torchaudio's layout maps onto them in models/conformer_checkpoint.h.
#pragma once

#include <attnzoo/layers/conformer_parts.h>
#include <attnzoo/models/attention_decoder.h>
#include <attnzoo/models/conformer_frontend.h>
#include <attnzoo/models/transducer.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/normalization.h>

#include <optional>
#include <string>
#include <tuple>

namespace attnzoo {

struct ConformerOptions {
  ConformerOptions(int64_t input_dim, int64_t num_heads, int64_t ffn_dim, int64_t num_layers,
                   int64_t depthwise_conv_kernel_size)
      : input_dim_(input_dim),
        num_heads_(num_heads),
        ffn_dim_(ffn_dim),
        num_layers_(num_layers),
        depthwise_conv_kernel_size_(depthwise_conv_kernel_size) {}

  // Model width D (torchaudio's name: the blocks' input is already D wide).
  TORCH_ARG(int64_t, input_dim);
  TORCH_ARG(int64_t, num_heads);
  TORCH_ARG(int64_t, ffn_dim);
  TORCH_ARG(int64_t, num_layers);
  // Odd: "same" padding; even (the paper's 32): one more frame of right context than left; see
  // ConformerConvModuleOptions.
  TORCH_ARG(int64_t, depthwise_conv_kernel_size);
  // Everywhere torchaudio applies it: feed-forward, attention probabilities and output,
  // convolution module.
  TORCH_ARG(double, dropout) = 0.0;
  // kBatchNorm (paper), kGroupNorm (torchaudio's use_group_norm) or kLayerNorm.
  TORCH_ARG(ConvNormKind, conv_norm) = ConvNormKind::kBatchNorm;
  // Convolution module before self-attention (torchaudio's option).
  TORCH_ARG(bool, convolution_first) = false;
  // Causal depthwise convolution (left padding only), for streaming; where its left zeros go
  // (ConformerConvModuleOptions: WeNet's module input, NeMo's depthwise input).
  TORCH_ARG(bool, causal_conv) = false;
  TORCH_ARG(CausalPadding, causal_padding) = CausalPadding::kModuleInput;
  // kNone (torchaudio), kRelPos (paper: Transformer-XL / ESPnet latest) or kRelPosWenet.
  TORCH_ARG(ConformerPosition, position) = ConformerPosition::kNone;
  // eps of every LayerNorm (ESPnet uses 1e-12), and of the norm after the depthwise convolution.
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(double, conv_norm_eps) = 1e-5;
  TORCH_ARG(std::string, attention_backend) = "auto";
  TORCH_ARG(AttentionBackendOptions, attention_options) = {};
  // Per-utterance softmax gates over the heads (ConformerAttentionOptions::head_gating).
  TORCH_ARG(bool, head_gating) = false;
  // Biases in the blocks' feed-forward, attention (but linear_pos) and convolution layers; the
  // largest NeMo models have none (use_bias: false).
  TORCH_ARG(bool, bias) = true;
  // Every frame attends only frames attention_left before to attention_right after it (-1:
  // unlimited), always, on top of any chunk mask: NeMo's limited att_context_size and its local
  // attention. Linear in the length on the CPU (ConformerAttentionOptions::window_left).
  TORCH_ARG(int64_t, attention_left) = -1;
  TORCH_ARG(int64_t, attention_right) = -1;
  // Longformer's global tokens within that window (ConformerAttentionOptions::global_tokens):
  // NeMo's rel_pos_local_attn with global_tokens, global_tokens_spacing, global_attn_separate.
  TORCH_ARG(int64_t, global_tokens) = 0;
  TORCH_ARG(int64_t, global_spacing) = 1;
  TORCH_ARG(bool, global_separate) = false;
};

class ConformerBlockImpl : public torch::nn::Cloneable<ConformerBlockImpl> {
 public:
  explicit ConformerBlockImpl(ConformerOptions options);
  void reset() override;
  // x: [B, T, D], lengths: [B] integral or undefined (all frames valid), pos_emb: [1, P, D]
  // (relative modes; computed when undefined) -> [B, T, D]. Frames beyond lengths hold values
  // that no valid frame depends on.
  // attn_mask: bool, true = excluded, broadcastable to [B, H, T, T] (e.g. a chunk mask [T, T]).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& lengths = {},
                        const torch::Tensor& pos_emb = {}, const torch::Tensor& attn_mask = {});

  // Streaming, inference only (see ConformerEncoderImpl::forward_chunk): the chunk x [B, C, D]
  // at positions first_position ... attends att_cache [B, H, Tc, 2·E] and itself, the causal
  // convolution continues from cnn_cache [B, D, K − 1] (both undefined at the start).
  // -> (output [B, C, D], new att_cache [B, H, Tc + C, 2·E], new cnn_cache [B, D, K − 1]).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward_chunk(
      const torch::Tensor& x, const torch::Tensor& att_cache, const torch::Tensor& cnn_cache,
      int64_t first_position);

  ConformerOptions options;
  ConformerFeedForward ffn1{nullptr};
  torch::nn::LayerNorm attn_norm{nullptr};
  ConformerAttention attn{nullptr};
  ConformerConvModule conv{nullptr};
  ConformerFeedForward ffn2{nullptr};
  torch::nn::LayerNorm final_norm{nullptr};
};
TORCH_MODULE(ConformerBlock);

class ConformerImpl : public torch::nn::Cloneable<ConformerImpl> {
 public:
  explicit ConformerImpl(ConformerOptions options);
  void reset() override;

  // x: [B, T, D], lengths: [B] integral, 0 <= lengths <= T (undefined: all T frames valid)
  // -> (output [B, T, D], lengths [B]). Output frames beyond lengths are not meaningful.
  // attn_mask: bool, true = excluded, broadcastable to [B, H, T, T] (chunk_attention_mask).
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x,
                                                   const torch::Tensor& lengths = {},
                                                   const torch::Tensor& attn_mask = {});

  ConformerOptions options;
  torch::nn::ModuleList layers{nullptr};
};
TORCH_MODULE(Conformer);

// ---------------------------------------------------------------------------------------------
// The whole encoder, WeNet's ConformerEncoder layout (the paper's figure 1 plus CMVN):
//
//   features [B, T, F] -> global_cmvn (optional) -> embed (subsampling, optional) -> x·√D and
//   positions -> conformer (the blocks) -> after_norm (optional) -> encoded [B, T', D]
//
// Positions (ConformerPosition):
//   kNone         no encodings and no x-scaling (torchaudio's Conformer, WeNet's
//                 NoPositionalEncoding)
//   kAbsPos       x·√D + sinusoidal encodings of positions 0 ... T' − 1 (Vaswani et al. 2017;
//                 WeNet's PositionalEncoding), then dropout; the blocks attend without positions
//   kRelPos       x·√D, then dropout; the blocks add Transformer-XL's relative term (ESPnet
//                 latest, the paper)
//   kRelPosWenet  x·√D, then dropout; WeNet's RelPositionMultiHeadedAttention in the blocks
// xscaling false leaves out the x·√D (NeMo's `xscaling: false`).
// WeNet also drops out the relative encodings themselves in training; we drop out x only.

// WeNet's chunk mask (subsequent_chunk_mask) in AttentionMask's sense, true = excluded: [T, T]
// bool on `device`, frame i in chunk c = i / chunk_size sees the frames of chunks
// c − num_left_chunks ... c (num_left_chunks < 0: every earlier chunk). chunk_size <= 0: no mask
// (undefined tensor). The mask under which streaming equals the offline forward.
torch::Tensor chunk_attention_mask(int64_t num_frames, int64_t chunk_size, int64_t num_left_chunks,
                                   torch::Device device = torch::kCPU);

struct ConformerEncoderOptions {
  // input_dim: features per frame F; blocks: the stack (its input_dim is the model width D; its
  // position is set from this struct's).
  ConformerEncoderOptions(int64_t input_dim, ConformerOptions blocks)
      : input_dim_(input_dim), blocks_(std::move(blocks)) {}
  TORCH_ARG(int64_t, input_dim);
  TORCH_ARG(ConformerOptions, blocks);
  // kNone (features already D wide: input_dim must equal D) or a ConformerSubsampling kind.
  TORCH_ARG(Subsampling, subsampling) = Subsampling::kConv2d4;
  // Subsampling convolution channels; 0: D.
  TORCH_ARG(int64_t, subsampling_channels) = 0;
  TORCH_ARG(ConformerPosition, position) = ConformerPosition::kRelPosWenet;
  // x·√D before the blocks (positions other than kNone only).
  TORCH_ARG(bool, xscaling) = true;
  TORCH_ARG(bool, global_cmvn) = false;
  // LayerNorm after the blocks (WeNet's after_norm, normalize_before).
  TORCH_ARG(bool, final_norm) = true;
  // The token vocabulary of the speech heads (the CTC head's and the transducer's); 0: none.
  TORCH_ARG(int64_t, vocab_size) = 0;
  // A CTC head over vocab_size (false: a transducer-only model).
  TORCH_ARG(bool, ctc_head) = true;
  // Utterance classes (keyword spotting, audio classification); 0: no classification head. The
  // head is a Linear [C, D] on the mean of the encoded frames over each utterance's valid ones.
  TORCH_ARG(int64_t, num_classes) = 0;
  // An attention decoder over the encoded frames (models/attention_decoder.h: WeNet's U2 and
  // U2++), for attention rescoring; its dim must be the model width D and its vocabulary the CTC
  // head's.
  TORCH_ARG(std::optional<AttentionDecoderOptions>, decoder) = std::nullopt;
  // A transducer head (models/transducer.h: NeMo's RNN-T and TDT); its vocabulary must be
  // vocab_size and its encoder_dim the model width D.
  TORCH_ARG(std::optional<TransducerOptions>, transducer) = std::nullopt;
};

class ConformerEncoderImpl : public torch::nn::Cloneable<ConformerEncoderImpl> {
 public:
  explicit ConformerEncoderImpl(ConformerEncoderOptions options);
  void reset() override;

  // features: [B, T, F], lengths: [B] integral in [0, T] (undefined: all T frames valid)
  // -> (encoded [B, T', D], lengths [B] after subsampling). Frames beyond the returned lengths are
  // not meaningful. T shorter than the subsampling's minimum is an error naming that minimum; an
  // utterance shorter than it inside a longer batch gets length 0.
  //
  // chunk_size > 0 restricts attention to chunk_attention_mask(T', chunk_size, num_left_chunks):
  // the offline view of streaming (WeNet's decoding_chunk_size, num_decoding_left_chunks).
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& features,
                                                   const torch::Tensor& lengths = {},
                                                   int64_t chunk_size = 0,
                                                   int64_t num_left_chunks = -1);

  // Streaming, WeNet's forward_chunk (inference only: call eval() first). Needs causal_conv, a
  // subsampling that streams (subsampling_streams: none, conv2d4/6/8, or a causal one), a norm
  // other than group_norm, and no attention_left/right.
  //   features    [B, Tin, F]: the input frames of one chunk, Tin >= right_context() + 1,
  //               beginning `lead` output frames (lead · subsampling_rate() input frames) before
  //               the chunk; C = (Tin − right_context() − 1) / subsampling_rate() + 1 − lead
  //               output frames
  //   offset      output frames produced before this chunk (the chunk's first position)
  //   required_cache_size  frames of attention cache to keep: < 0 all, 0 none, else the last
  //               that many (chunk_size · num_left_chunks)
  //   att_cache   [num_layers, B, H, Tc, 2·E] keys and values of earlier frames, or undefined
  //   cnn_cache   [num_layers, B, D, K − 1] or undefined (the start of the stream)
  // -> (encoded [B, C, D], new att_cache, new cnn_cache). Unlike WeNet's [layers, H, Tc, 2·E],
  // att_cache has a batch dim: B streams advance together.
  //   lead        output frames computed again from the input's start and dropped: a causal
  //               subsampling's first outputs read its zero padding instead of earlier frames
  //               (at most stream_lead(), and at most offset)
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward_chunk(
      const torch::Tensor& features, int64_t offset, int64_t required_cache_size,
      const torch::Tensor& att_cache = {}, const torch::Tensor& cnn_cache = {}, int64_t lead = 0);

  // Throws c10::ValueError naming `who` when this encoder cannot stream (training mode, a
  // centred depthwise kernel, group_norm, a subsampling that pads).
  void check_streamable(const char* who) const;

  // Encodes whole utterances (all B of length T) chunk by chunk through forward_chunk, as a
  // streaming recognizer does (WeNet's forward_chunk_by_chunk): equal, within rounding, to
  // forward(features, {}, chunk_size, num_left_chunks). -> (encoded [B, T', D], lengths [B]).
  std::tuple<torch::Tensor, torch::Tensor> forward_chunk_by_chunk(const torch::Tensor& features,
                                                                  int64_t chunk_size,
                                                                  int64_t num_left_chunks = -1);

  // Input frames per output frame, and the input frames beyond the first that one output frame
  // needs (WeNet's subsampling_rate and right_context: 4 and 6 for conv2d4).
  int64_t subsampling_rate() const;
  int64_t right_context() const;
  // The output frames a chunk must compute again before its own so that they equal the whole
  // utterance's (NeMo's drop_extra_pre_encoded): 0 without padding, 2 for the causal kinds, whose
  // first two outputs of a chunk read the zeros padded before it.
  int64_t stream_lead() const;

  // CTC head: encoded [B, T', D] -> log-probabilities [B, T', vocab_size] (needs vocab_size > 0).
  torch::Tensor ctc_log_probs(const torch::Tensor& encoded);
  // Classification head: encoded [B, T', D] and its lengths [B] -> logits [B, num_classes]
  // (needs num_classes > 0).
  torch::Tensor classify(const torch::Tensor& encoded, const torch::Tensor& lengths);
  // Utterance embedding: the mean of encoded [B, T', D] over each utterance's valid frames
  // -> [B, D] (zeros for an empty utterance).
  static torch::Tensor utterance_embedding(const torch::Tensor& encoded,
                                           const torch::Tensor& lengths);

  ConformerEncoderOptions options;
  GlobalCmvn global_cmvn{nullptr};           // global_cmvn only
  ConformerSubsampling embed{nullptr};       // subsampling != "none" only
  torch::nn::Dropout dropout{nullptr};       // after the positional encoding
  Conformer conformer{nullptr};              // conformer.layers.{i}
  torch::nn::LayerNorm after_norm{nullptr};  // final_norm only
  torch::nn::Linear ctc{nullptr};            // [vocab, D], vocab_size > 0 and ctc_head only
  torch::nn::Linear classifier{nullptr};     // [classes, D], num_classes > 0 only
  AttentionDecoder decoder{nullptr};         // options.decoder only
  Transducer transducer{nullptr};            // options.transducer only
};
TORCH_MODULE(ConformerEncoder);

// A stream of audio features encoded as it arrives: push() any number of frames at a time and
// get the encoder frames that became computable; finish() flushes the rest. Chunk by chunk
// through ConformerEncoderImpl::forward_chunk, so the concatenated outputs equal
// forward(all features, {}, chunk_size, num_left_chunks). The encoder must be in eval mode.
class ConformerStream {
 public:
  ConformerStream(ConformerEncoder encoder, int64_t chunk_size, int64_t num_left_chunks = -1);

  // features: [B, n, F] (n may be 0) -> encoded [B, m, D], m >= 0 new frames.
  torch::Tensor push(const torch::Tensor& features);
  // Encodes the frames still buffered (a last, shorter chunk) -> [B, m, D]; the stream then
  // takes no more input until reset().
  torch::Tensor finish();
  void reset();

  int64_t offset() const { return offset_; }  // encoder frames produced so far

 private:
  torch::Tensor run(const torch::Tensor& window, int64_t lead);

  ConformerEncoder encoder_;
  int64_t chunk_size_, num_left_chunks_;
  torch::Tensor pending_;  // [B, n, F] input frames from the next chunk's window on
  torch::Tensor att_cache_, cnn_cache_;
  int64_t offset_ = 0;
  bool finished_ = false;
};

}  // namespace attnzoo
