// A Transcript (api/speech_recognizer.h) as one JSON object, the form `attnzoo transcribe --json`
// prints and `attnzoo serve` answers:
//
//   {"audio": "a.wav", "text": "four one", "score": -0.8, "confidence": 0.97, "seconds": 1.4,
//    "tokens": [{"token": "four", "id": 5, "start": 0.52, "end": 0.72, "confidence": 0.99}, ...],
//    "nbest": [{"text": ..., "score": ..., "confidence": ...}, ...]}   (when there are several)
//
// or {"audio": "a.wav", "error": "..."} for a failed one. Times are seconds from the start of the
// audio; the text is UTF-8, invalid bytes replaced.
#pragma once

#include <attnzoo/api/speech_recognizer.h>

#include <string>

namespace attnzoo {

std::string transcript_json(const Transcript& transcript);

}  // namespace attnzoo
