// The SpeechSequence of a speech recognizer and of a speech encoder (served_model.h): live audio
// pushed piece by piece through the model's streaming encoder (SpeechRecognizer::Stream,
// SpeechEncoder::Stream), the same computation as the WebSocket route (speech_stream.h) without
// its messages.
#pragma once

#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/serve/served_model.h>

#include <memory>

namespace attnzoo::serve {

// `sample_rate`: of the samples pushed (0: the model's). `chunk`: encoder frames per chunk (0: the
// model config's). `ticket` is released with the
// sequence. Pushing more than `max_audio_seconds` of audio is a ProtocolError.
std::unique_ptr<SpeechSequence> recognizer_sequence(
    std::shared_ptr<const SpeechRecognizer> recognizer, int64_t sample_rate,
    double max_audio_seconds, int64_t chunk, std::shared_ptr<void> ticket);
std::unique_ptr<SpeechSequence> encoder_sequence(std::shared_ptr<const SpeechEncoder> encoder,
                                                 int64_t sample_rate, double max_audio_seconds,
                                                 int64_t chunk, std::shared_ptr<void> ticket);

}  // namespace attnzoo::serve
