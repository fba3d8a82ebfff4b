#include <attnzoo/serve/speech_stream.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

namespace attnzoo::serve {
namespace {

using nlohmann::json;

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

WebSocketMessage text_message(const json& value) { return {true, dump(value)}; }

StreamReply failed(const std::string& message) {
  StreamReply reply;
  reply.messages.push_back(text_message({{"status", "failed"}, {"message", message}}));
  reply.close = true;
  reply.close_reason = "failed";
  return reply;
}

int64_t milliseconds(double seconds) { return std::llround(seconds * 1000.0); }

// New encoder frames [k, D]: a header, then their float32 values.
void add_frames(StreamReply& reply, const torch::Tensor& frames) {
  if (frames.size(0) == 0) return;
  const auto values = frames.to(torch::kFloat).contiguous();
  reply.messages.push_back(text_message({{"status", "ok"},
                                         {"type", "encoded"},
                                         {"frames", values.size(0)},
                                         {"dim", values.size(1)}}));
  WebSocketMessage binary{false, {}};
  binary.data.assign(reinterpret_cast<const char*>(values.data_ptr<float>()),
                     static_cast<size_t>(values.numel()) * sizeof(float));
  reply.messages.push_back(std::move(binary));
}

}  // namespace

SpeechStream::SpeechStream(std::shared_ptr<const SpeechRecognizer> recognizer,
                           std::shared_ptr<const SpeechEncoder> encoder, double max_audio_seconds,
                           int64_t chunk, TaskPool& pool, std::shared_ptr<void> ticket)
    : recognizer_(std::move(recognizer)),
      encoder_(std::move(encoder)),
      max_audio_seconds_(max_audio_seconds),
      chunk_(chunk),
      pool_(pool),
      ticket_(std::move(ticket)) {}

void SpeechStream::on_message(WebSocketMessage message, StreamRespond respond) {
  // The chunk runs on a stream thread, not the I/O thread that read it.
  const bool queued =
      pool_.submit([self = shared_from_this(), message = std::move(message), respond]() mutable {
        StreamReply reply;
        try {
          reply = message.text ? self->signal(message.data) : self->audio(message.data);
        } catch (const c10::Error& e) {
          reply = failed(e.what_without_backtrace());
        } catch (const std::exception& e) {
          reply = failed(e.what());
        }
        respond(std::move(reply));
      });
  if (!queued) respond(failed("the server is shutting down"));
}

// A text message: the "start" or "end" signal.
StreamReply SpeechStream::signal(const std::string& text) {
  const auto message = json::parse(text, nullptr, false);
  if (message.is_discarded() || !message.is_object()) {
    return failed("a text message must be a JSON object with a \"signal\"");
  }
  const auto signal = message.find("signal");
  if (signal == message.end() || !signal->is_string()) {
    return failed("a text message needs a \"signal\": \"start\" or \"end\"");
  }
  const auto name = signal->get<std::string>();
  if (name == "end") return end();
  if (name != "start") return failed("unknown signal '" + name + "': \"start\" or \"end\"");
  if (sample_rate_ != 0) return failed("\"start\" came twice");
  const int64_t model_rate =
      (recognizer_ ? recognizer_->config() : encoder_->config()).features->sample_rate;
  sample_rate_ = model_rate;
  if (const auto it = message.find("nbest"); it != message.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1) {
      return failed("\"nbest\" must be an integer >= 1");
    }
    nbest_ = it->get<int64_t>();
  }
  if (const auto it = message.find("continuous_decoding");
      it != message.end() && !it->is_boolean()) {
    return failed("\"continuous_decoding\" must be true or false");
  }
  if (const auto it = message.find("sample_rate"); it != message.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1000 || it->get<int64_t>() > 768000) {
      return failed("\"sample_rate\" must be an integer from 1000 to 768000 (Hz)");
    }
    sample_rate_ = it->get<int64_t>();
  }
  if (recognizer_) {
    transcribing_.emplace(recognizer_->stream(sample_rate_, chunk_, "stream"));
  } else {
    encoding_.emplace(encoder_->stream(sample_rate_, chunk_, "stream"));
  }
  StreamReply reply;
  reply.messages.push_back(text_message({{"status", "ok"}, {"type", "server_ready"}}));
  return reply;
}

StreamReply SpeechStream::audio(const std::string& bytes) {
  if (!transcribing_ && !encoding_) {
    return failed("the \"start\" signal is expected before audio");
  }
  if (bytes.size() % 2 != 0) {
    return failed("audio must be 16-bit PCM: a binary message of " + std::to_string(bytes.size()) +
                  " bytes is not a whole number of samples");
  }
  const auto count = static_cast<int64_t>(bytes.size() / 2);
  samples_ += count;
  const double seconds = static_cast<double>(samples_) / static_cast<double>(sample_rate_);
  if (seconds > max_audio_seconds_) {
    return failed("the stream is longer than max_audio_seconds (" +
                  std::to_string(max_audio_seconds_) + " s)");
  }
  auto samples = torch::empty({count}, torch::kFloat);
  auto* out = samples.data_ptr<float>();
  for (int64_t i = 0; i < count; ++i) {
    int16_t value = 0;
    std::memcpy(&value, bytes.data() + 2 * i, 2);  // little-endian hosts
    out[i] = static_cast<float>(value) / 32768.0f;
  }
  StreamReply reply;
  if (encoding_) {
    const auto frames = encoding_->push(samples);
    frames_ += frames.size(0);
    add_frames(reply, frames);
    return reply;
  }
  const auto partial = transcribing_->push(samples);
  if (!partial.best.text.empty() && partial.best.text != last_partial_) {
    last_partial_ = partial.best.text;
    const json nbest =
        json::array({{{"sentence", partial.best.text}, {"stable", partial.stable.text}}});
    reply.messages.push_back(
        text_message({{"status", "ok"}, {"type", "partial_result"}, {"nbest", dump(nbest)}}));
  }
  return reply;
}

StreamReply SpeechStream::end() {
  if (!transcribing_ && !encoding_) return failed("\"end\" came before \"start\"");
  StreamReply reply;
  reply.close = true;
  reply.close_reason = "speech end";
  if (encoding_) {
    const auto frames = encoding_->finish();
    frames_ += frames.size(0);
    add_frames(reply, frames);
    reply.messages.push_back(
        text_message({{"status", "ok"}, {"type", "speech_end"}, {"frames", frames_}}));
    encoding_.reset();
    return reply;
  }
  const auto transcript = transcribing_->finish();
  transcribing_.reset();
  auto nbest = json::array();
  for (const auto& h : transcript.hypotheses) {
    if (static_cast<int64_t>(nbest.size()) == nbest_) break;
    auto pieces = json::array();
    for (const auto& token : h.tokens) {
      pieces.push_back({{"word", token.text},
                        {"start", milliseconds(token.start_seconds)},
                        {"end", milliseconds(token.end_seconds)}});
    }
    nbest.push_back({{"sentence", h.text}, {"word_pieces", pieces}});
  }
  reply.messages.push_back(
      text_message({{"status", "ok"}, {"type", "final_result"}, {"nbest", dump(nbest)}}));
  reply.messages.push_back(text_message({{"status", "ok"}, {"type", "speech_end"}}));
  return reply;
}

}  // namespace attnzoo::serve
