// The exceptions attnzoo throws for bad input. Each message names what was wrong first: the file,
// the YAML key, the argument or the tensor. Catch attnzoo::Error to handle any of them:
//
//   try {
//     auto predictions = classifier.classify(paths);
//   } catch (const attnzoo::Error& e) {  // ConfigError, CheckpointError, ImageError, ...
//     std::cerr << e.what() << '\n';
//   }
//
// Tensor preconditions and option values stay c10::Errors (TORCH_CHECK), as in LibTorch.
//
// Every attnzoo::Error, and where it is defined:
//   InputError        here                        a tensor a model cannot take (shape, dtype,
//                                                 length); thrown by models/ and api/
//   CheckpointError   here                        a PyTorch checkpoint file that is malformed,
//                                                 hostile or holds what attnzoo does not read,
//                                                 or a CMVN statistics file beside it (io/);
//                                                 weights that do not fit the module
//                                                 (models/, train/)
//   SafetensorsError  io/safetensors_format.h     a malformed, truncated or hostile .safetensors
//   ConfigError       configs/model_config.h      a YAML document or an override (file, key, line)
//   ImageError        preprocess/image/header.h   an unreadable or unsupported image
//   AudioError        preprocess/audio/error.h    an unreadable or unusable audio file or waveform
//   UnitsError        decoding/error.h            a token table (units file, token list)
//   DecodingError     decoding/error.h            CTC log-probabilities or decoder options
//   DatasetError      train/data.h                a training folder or list file
//   ProtocolError     serve/v2_protocol.h         a KServe v2 request the server cannot take
// The two defined here are thrown by more than one folder; the others live beside the one
// folder that throws them.
//
// This header depends on the standard library only: the torch-free parsers (and their fuzz
// targets) include it.
#pragma once

#include <stdexcept>

namespace attnzoo {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tensor handed to a model that it cannot take: the wrong rank, sizes, dtype, or too few frames.
// The message starts with what the caller called the tensor.
class InputError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that cannot be read or loaded: a malformed, truncated or hostile PyTorch file
// (io/torch_checkpoint.h), or weights that do not fit the module (models/checkpoint.h). The
// message names the file first.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace attnzoo
