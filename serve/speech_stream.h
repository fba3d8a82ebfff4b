// Live speech over a WebSocket (/v2/models/{m}/stream), in the protocol of WeNet's runtime
// server, so its clients work unchanged:
//
//   client: {"signal": "start", "nbest": 1, "continuous_decoding": false}     (text)
//   server: {"status": "ok", "type": "server_ready"}
//   client: audio, 16-bit little-endian PCM, mono, at the model's rate        (binary, repeated)
//   server: {"status": "ok", "type": "partial_result",
//            "nbest": "[{\"sentence\": \"four one\"}]"}  when the best text changed
//   client: {"signal": "end"}
//   server: {"status": "ok", "type": "final_result", "nbest": "[{\"sentence\": ...,
//            \"word_pieces\": [{\"word\": \"four\", \"start\": 520, \"end\": 720}, ...]}]"}
//           {"status": "ok", "type": "speech_end"}, then closes the connection (1000)
//
// "nbest" is a JSON document inside a string, as WeNet sends it; times are milliseconds. A
// partial result's entries also carry "stable": the prefix no later audio changes
// (PartialTranscript). attnzoo's additions to "start": "sample_rate" (Hz, when the audio is not
// at the model's rate; it is resampled). There is no endpointing: "continuous_decoding" is
// accepted, and the result comes when the client sends "end".
//
// A speech encoder streams the same way; its replies to audio are
// {"status": "ok", "type": "encoded", "frames": k, "dim": D} followed by a binary message of the
// k new encoder frames (float32, little-endian, row after row), and "end" gives the last frames
// and {"status": "ok", "type": "speech_end", "frames": total}.
//
// Anything else (a malformed or unknown message, audio before "start", an odd number of bytes,
// more than max_audio_seconds of audio, a failure of the model) is answered
// {"status": "failed", "message": "..."} and the connection closed, as WeNet's server does. The
// chunks run on the server's stream threads (a TaskPool), one message of a stream at a time.
#pragma once

#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/serve/http_server.h>
#include <attnzoo/serve/task_pool.h>

#include <memory>
#include <optional>
#include <string>

namespace attnzoo::serve {

class SpeechStream : public StreamHandler, public std::enable_shared_from_this<SpeechStream> {
 public:
  // Transcripts from `recognizer`, or encoder frames from `encoder` (one of them non-null; the
  // object stays alive with the stream). `ticket` is released with the stream (the server
  // counts its open streams with it).
  SpeechStream(std::shared_ptr<const SpeechRecognizer> recognizer,
               std::shared_ptr<const SpeechEncoder> encoder, double max_audio_seconds,
               int64_t chunk, TaskPool& pool, std::shared_ptr<void> ticket);

  void on_message(WebSocketMessage message, StreamRespond respond) override;

 private:
  StreamReply signal(const std::string& text);  // "start" or "end"
  StreamReply audio(const std::string& bytes);
  StreamReply end();

  std::shared_ptr<const SpeechRecognizer> recognizer_;
  std::shared_ptr<const SpeechEncoder> encoder_;
  double max_audio_seconds_;
  int64_t chunk_;  // encoder frames per chunk; 0: the model config's
  TaskPool& pool_;
  std::shared_ptr<void> ticket_;
  std::optional<SpeechRecognizer::Stream> transcribing_;
  std::optional<SpeechEncoder::Stream> encoding_;
  int64_t nbest_ = 1;
  int64_t sample_rate_ = 0;
  int64_t samples_ = 0;
  int64_t frames_ = 0;
  std::string last_partial_;
};

}  // namespace attnzoo::serve
