// The exceptions of decoding/: both are attnzoo::Errors (core/error.h), so a caller that catches
// attnzoo::Error handles them with the rest.
//   DecodingError  a decoder's input or options: the message names the argument (blank_id,
//                  beam_size, log_probs at frame t, ...) and what was expected.
//   UnitsError     a token table (units.txt, lang_char.txt, an ESPnet token list) or a
//                  SentencePiece model: the message starts with "file:line:" where a line applies;
//                  file() and line() carry the same, line() 0 for the file as a whole.
#pragma once

#include <attnzoo/core/error.h>

#include <cstdint>
#include <string>
#include <utility>

namespace attnzoo::decoding {

class DecodingError : public Error {
 public:
  using Error::Error;
};

class UnitsError : public Error {
 public:
  // what(): "<file>:<line>: <message>", or "<file>: <message>" when line is 0.
  UnitsError(const std::string& message, std::string file, int64_t line)
      : Error(file + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + message),
        file_(std::move(file)),
        line_(line) {}
  const std::string& file() const { return file_; }
  int64_t line() const { return line_; }

 private:
  std::string file_;
  int64_t line_;
};

}  // namespace attnzoo::decoding
