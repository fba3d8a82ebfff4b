// The one exception of the audio frontend: anything wrong with an audio file or a waveform
// (missing, empty, truncated, not audio, an unsupported encoding, NaN or infinite samples, too
// short for one frame). The message names the source first: the file path, or what the caller
// called an in-memory buffer or waveform. Mistakes in the options (a frame longer than a second,
// a negative rate) are c10::ValueErrors naming the option instead.
#pragma once

#include <attnzoo/core/error.h>

namespace attnzoo {

class AudioError : public Error {
 public:
  using Error::Error;
};

}  // namespace attnzoo
