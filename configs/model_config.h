// A model described by a YAML document: its architecture (the Options of its family), attention
// backend, preprocessing, labels and checkpoint layout, as one plain struct. The schema is
// documented in configs/README.md; configs/ is the only code in the project that reads YAML.
//
// Every mistake in a document is a ConfigError whose message names the file, the key path, its
// line and column and what was expected, e.g.
//   configs/vit/vit_base_patch16_224.yaml:9:14: architecture.embed_dim: embed_dim 768 is not
//   divisible by num_heads 10 (each head takes embed_dim / num_heads)
// Values that came from an override (`key.path=value`, the CLI's --set) are reported by the
// override instead of a line and column.
#pragma once

#include <attnzoo/core/error.h>
#include <attnzoo/decoding/attention_rescoring.h>
#include <attnzoo/decoding/ctc_decoder.h>
#include <attnzoo/decoding/decoding_head.h>
#include <attnzoo/decoding/units.h>
#include <attnzoo/preprocess/audio/feature_options.h>
#include <attnzoo/preprocess/image/transform_options.h>

#include <any>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnzoo {

class ConfigError : public Error {
 public:
  // `line` and `column` are 1-based; 0 when the error has no position (a whole-file error or a
  // value that came from an override).
  ConfigError(const std::string& message, std::string file, std::string key_path, int line = 0,
              int column = 0)
      : Error(message),
        file_(std::move(file)),
        key_path_(std::move(key_path)),
        line_(line),
        column_(column) {}

  const std::string& file() const { return file_; }
  const std::string& key_path() const { return key_path_; }  // "" for whole-document errors
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  std::string file_;
  std::string key_path_;
  int line_;
  int column_;
};

// How images are prepared for a vision model (`preprocess:`): timm's pretrained cfg (input_size,
// crop_pct, interpolation, crop_mode, mean, std) read into the image frontend's own options,
// which hold no constants of their own; and the channels the model takes.
struct ImagePreprocessConfig {
  int64_t channels = 3;             // input_size[0]; the image frontend makes RGB images (3)
  ImageTransformOptions transform;  // input_size[1] and [2] are its height and width
};

// The decoding mode a streaming model is meant for (`streaming:`): the chunk mask of
// ConformerEncoderImpl::forward and the chunk size of ConformerStream. chunk_size 0: offline.
struct StreamingConfig {
  int64_t chunk_size = 0;
  int64_t num_left_chunks = -1;  // < 0: every earlier chunk
};

struct LabelsConfig {
  enum class Source { kNone, kImageNet, kFile, kInline };
  Source source = Source::kNone;
  std::string file;  // kFile: the labels file, resolved against the YAML file's folder
  std::vector<std::string> names;  // kInline: the class names in order (`labels: [cat, dog]`)
};

// How a model's linear layers run: as trained, or in int8 on the CPU (layers/int8_inference.h),
// the weights quantized per output channel at load, the activations per row at run time.
enum class Quantization { kNone, kInt8 };
// "none" | "int8": the values of a config's inference.quantize.
constexpr const char* to_string(Quantization quantization) {
  return quantization == Quantization::kInt8 ? "int8" : "none";
}

// The dtype a model runs in where its caller names none (ModelOptions::dtype unset, the CLI's
// --dtype absent): float32, bfloat16, float16, or auto: bfloat16 on a CPU with AVX512-BF16 or
// AMX, float32 on other CPUs and on CUDA (api/inference_dtype.h).
enum class InferenceDtype { kFp32, kBf16, kFp16, kAuto };
// "fp32" | "bf16" | "fp16" | "auto": the values of a config's inference.dtype.
constexpr const char* to_string(InferenceDtype dtype) {
  switch (dtype) {
    case InferenceDtype::kBf16:
      return "bf16";
    case InferenceDtype::kFp16:
      return "fp16";
    case InferenceDtype::kAuto:
      return "auto";
    case InferenceDtype::kFp32:
      break;
  }
  return "fp32";
}

// `inference:`: how the model runs when it serves predictions.
struct InferenceConfig {
  Quantization quantize = Quantization::kNone;
  InferenceDtype dtype = InferenceDtype::kFp32;
};

// `decoding:` of a model with a CTC head: its token table, how the table's tokens make text, and
// how the head's outputs are searched (api/speech_recognizer.h). Training with train.loss ctc
// tokenizes its transcripts with the same table (decoding/tokenizer.h).
struct DecodingConfig {
  std::string units;  // the token table, resolved against the YAML's folder; empty: no section
  decoding::UnitsFormat units_format = decoding::UnitsFormat::kWenet;
  // `decoding.tokens`: the table inline, token i at id i (ESPnet's token_list), instead of a
  // units file; empty: none.
  std::vector<std::string> tokens;
  decoding::TextJoin text = decoding::TextJoin::kCharacters;
  // The SentencePiece model of a text: sentencepiece table (resolved); empty: none (decoding
  // then joins the pieces itself, and training cannot cut transcripts into pieces).
  std::string sentencepiece_model;
  decoding::CtcSearch search = decoding::CtcSearch::kPrefixBeam;
  // ctc, or attention_rescoring: the beam's hypotheses (all beam_size of them) ranked again with
  // the model's attention decoder (architecture.decoder), weighted by `rescoring`; needs search
  // prefix_beam.
  decoding::DecodingMode mode = decoding::DecodingMode::kCtc;
  decoding::AttentionRescoringOptions rescoring;
  // beam_size, nbest, the per-frame pruning and beam_unit; blank_id comes from the units and
  // frame_period_seconds from the model.
  decoding::PrefixBeamSearchOptions beam;
  // Live results (api/speech_recognizer.h): the text shown as stable is what the hypotheses
  // within a factor e^stable_margin of the best agree on, and the others are dropped once it
  // passes them (decoding::CtcPrefixBeamSearch::stable_tokens). 0: every hypothesis of the beam
  // must agree (then the final result is the offline one exactly, but the improbable
  // alternatives a beam keeps can hold the stable text back until the end).
  double stable_margin = 0.0;
  // The head that decodes: the CTC head (with the searches above), or the transducer
  // (architecture.transducer). The transducer where the model has one, else CTC.
  decoding::DecodingHead head = decoding::DecodingHead::kCtc;
  // The transducer's search: greedy, at most max_symbols tokens per encoder frame (NeMo's
  // greedy.max_symbols); or beam (NeMo's strategy beam) with beam.beam_size, returning
  // beam.nbest hypotheses ranked by score / (tokens + 1) with score_norm (NeMo's
  // beam.score_norm), else by score.
  decoding::TransducerSearch transducer_search = decoding::TransducerSearch::kGreedy;
  int64_t max_symbols = 10;
  bool score_norm = true;
  bool defined() const { return !units.empty() || !tokens.empty(); }
};

struct ModelConfig {
  std::string name;
  // The model family (`family:`), a name of configs/model_family.h's registry.
  std::string family;
  // The family's architecture: the Options its module is built from (ViTOptions for vit,
  // ConformerEncoderOptions for conformer, ...); read through options<T>().
  std::any architecture;
  // The input frontend: images, or audio features (the family's input kind says which is used).
  ImagePreprocessConfig image;
  // How audio becomes the model's features (`features:`), read into the audio frontend's own
  // options: fbank (Kaldi's compute-fbank-feats, kaldi-native-fbank,
  // torchaudio.compliance.kaldi) or whisper_log_mel. Unset without the section (or with
  // `kind: none`): the model takes features made elsewhere.
  std::optional<AudioFeatureOptions> features;
  // The features' frame shift: the section's, else the frontend's default (Kaldi's 10 ms), which
  // a model without the section is assumed to take.
  double frame_shift_ms() const {
    return (features ? *features : AudioFeatureOptions{}).frame_shift_ms;
  }
  StreamingConfig streaming;  // models that stream (the Conformer)
  DecodingConfig decoding;    // models with a CTC head
  LabelsConfig labels;
  InferenceConfig inference;
  // Checkpoint layout (`checkpoint.format`: one of the family's layouts). Empty: detected from the
  // tensor names when weights are loaded.
  std::string checkpoint_format;
  // The weights of the model (`checkpoint.file`: a safetensors file, a PyTorch checkpoint or a
  // sharded index, resolved against the YAML's folder), loaded when no other weights are given:
  // a model folder's own (configs/model_source.h). Empty: none.
  std::string checkpoint_file;
  // `checkpoint.key`: where a PyTorch training checkpoint keeps the state dict
  // (io/torch_checkpoint.h); empty: found.
  std::string checkpoint_key;
  // `checkpoint.cmvn_file`: the statistics of the model's global CMVN (io/cmvn_stats.h: WeNet's
  // global_cmvn as text or JSON, ESPnet's feats_stats.npz), resolved like checkpoint.file. They
  // initialise the model when it is built, and a checkpoint's own statistics replace them when it
  // has some, as WeNet and ESPnet load them. Empty: none (families with global CMVN only).
  std::string cmvn_file;
  std::string source;                  // the YAML file (or the name given to parse_model_config)
  std::vector<std::string> overrides;  // applied to the document, in order
  // The key paths the document (or an override) gives a value, e.g. "architecture.norm_eps";
  // the others took their defaults.
  std::set<std::string> stated;

  // The architecture as the family's Options; throws ConfigError naming the model and its family
  // when they are of another type.
  template <class Options>
  const Options& options() const {
    const auto* o = std::any_cast<Options>(&architecture);
    if (!o) throw wrong_architecture();
    return *o;
  }
  template <class Options>
  Options& options() {
    auto* o = std::any_cast<Options>(&architecture);
    if (!o) throw wrong_architecture();
    return *o;
  }
  // True when an override (`--set`) gives `key_path` or a mapping above it a value.
  bool overridden(const std::string& key_path) const;

  template <class Options>
  bool has_options() const {
    return std::any_cast<Options>(&architecture) != nullptr;
  }

 private:
  ConfigError wrong_architecture() const;
};

// Reads and validates a YAML model file (or a model folder of a source: configs/model_source.h).
// `overrides` are `key.path=value` strings (value in YAML
// syntax: `architecture.depth=6`, `preprocess.mean=[0.5, 0.5, 0.5]`), applied to the document
// before validation, in order, and validated like the file itself.
ModelConfig load_model_config(const std::string& path,
                              const std::vector<std::string>& overrides = {});

// The same for a document in memory; `source` names it in messages and relative labels files are
// resolved against its folder.
ModelConfig parse_model_config(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides = {});

}  // namespace attnzoo
