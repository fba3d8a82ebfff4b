// `attnzoo transcribe`: audio files to text through a SpeechRecognizer (api/speech_recognizer.h):
// the model's features, its Conformer and CTC or transducer head, its token table and search, as
// its YAML's decoding section says, with the search's settings on flags. Offline by default
// (batched, or chunk by chunk with --stream); --live feeds each file to a live stream in blocks as
// a microphone would and prints each partial result that grew, then the final one. A line per file
// (JSON lines with --json: text, confidence, score, seconds, ms, tokens with times, the n-best;
// or error). A bad file gets its error and the others are still transcribed; the exit status is 1
// if any failed.
#include "tools/cli/commands.h"

#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/api/transcript_json.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/preprocess/audio/read.h>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

namespace attnzoo::cli {
namespace {

struct TranscribeOptions {
  std::string model;
  std::vector<std::string> audio;
  SpeechRecognizerOptions recognizer;
  bool greedy = false;
  int64_t beam = 0;
  int64_t nbest = 0;
  bool stream = false;
  bool live = false;
  int64_t chunk = 0;
  double block_ms = 100.0;
  bool json = false;
  bool times = false;
};

// "four(0.52-0.72) one(0.80-1.00)"
std::string timed_tokens(const TranscriptHypothesis& h) {
  std::string out;
  char span[64];
  for (const auto& t : h.tokens) {
    std::snprintf(span, sizeof(span), "(%.2f-%.2f)", t.start_seconds, t.end_seconds);
    out += (out.empty() ? "" : " ") + t.text + span;
  }
  return out;
}

void print_transcript(const Transcript& t, const TranscribeOptions& o) {
  if (o.json) {
    auto line = nlohmann::json::parse(transcript_json(t));
    if (t.ok()) {
      line["ms"] = t.encode_ms + t.decode_ms;
      line["decode_ms"] = t.decode_ms;
      if (o.live) line["final"] = true;
    }
    std::cout << line.dump() << "\n";
    return;
  }
  if (!t.ok()) {
    std::cout << t.audio << ": error: " << t.error << "\n";
    return;
  }
  const auto& best = t.best();
  std::printf("%s (%.2f s, %.1f ms, confidence %.3f): %s\n", t.audio.c_str(), t.seconds,
              t.encode_ms + t.decode_ms, best.confidence, best.text.c_str());
  if (o.times) std::printf("  %s\n", timed_tokens(best).c_str());
  for (size_t i = 1; i < t.hypotheses.size(); ++i) {
    std::printf("  %zu. %.3f  %s\n", i + 1, t.hypotheses[i].score, t.hypotheses[i].text.c_str());
  }
}

// One file fed to a live stream in blocks of o.block_ms; prints each partial whose stable text
// grew, then the final result.
Transcript transcribe_live(const SpeechRecognizer& recognizer, const std::string& path,
                           const TranscribeOptions& o) {
  AudioReadOptions read = o.recognizer.encoder.read;
  auto probe = AudioReader::open(path, read);
  const int64_t rate = probe.info().sample_rate;
  read.block_frames = std::max<int64_t>(1, std::llround(o.block_ms * rate / 1000.0));
  auto reader = AudioReader::open(path, read);
  auto live = recognizer.stream(rate, o.chunk, path);
  std::string shown;
  for (auto block = reader.read(); block.size(0) > 0; block = reader.read()) {
    const auto partial = live.push(block);
    if (partial.stable.text == shown) continue;
    shown = partial.stable.text;
    if (o.json) {
      std::cout << nlohmann::json{{"audio", path},
                                  {"at", partial.seconds},
                                  {"partial", partial.stable.text},
                                  {"best", partial.best.text}}
                       .dump()
                << "\n";
    } else {
      std::printf("%s [%.2f s] %s\n", path.c_str(), partial.seconds, partial.stable.text.c_str());
    }
    std::cout.flush();
  }
  return live.finish();
}

int run_transcribe(TranscribeOptions o) {
  auto& overrides = o.recognizer.encoder.overrides;
  // Whichever head decodes: the CTC head's search and the transducer's.
  if (o.greedy) {
    overrides.push_back("decoding.search=greedy");
    overrides.push_back("decoding.transducer_search=greedy");
  }
  if (o.beam > 0) {
    overrides.push_back("decoding.search=prefix_beam");
    overrides.push_back("decoding.transducer_search=beam");
    overrides.push_back("decoding.beam_size=" + std::to_string(o.beam));
  }
  if (o.nbest > 0) overrides.push_back("decoding.nbest=" + std::to_string(o.nbest));
  if (o.stream) {
    const auto config = resolve_model_config(o.model, recognizer_overrides(o.recognizer));
    o.recognizer.encoder.stream_chunk = o.chunk > 0 ? o.chunk : config.streaming.chunk_size;
    if (o.recognizer.encoder.stream_chunk <= 0) {
      throw Error("--stream: give --chunk or a config with streaming.chunk_size");
    }
  }
  const SpeechRecognizer recognizer(o.model, o.recognizer);
  const auto& config = recognizer.config();
  if (!o.json) {
    const auto& d = config.decoding;
    std::cout << config.name << " (" << config.source << "), "
              << recognizer.encoder().weights_description() << ", units "
              << recognizer.tokenizer().units().source() << ", " << to_string(d.search);
    if (d.search == decoding::CtcSearch::kPrefixBeam) std::cout << " beam " << d.beam.beam_size;
    if (d.mode == decoding::DecodingMode::kAttentionRescoring) {
      std::cout << ", attention rescoring (ctc_weight " << d.rescoring.ctc_weight
                << ", reverse_weight " << d.rescoring.reverse_weight << ")";
    }
    if (o.stream) std::cout << ", streaming in chunks of " << o.recognizer.encoder.stream_chunk;
    std::cout << "\n";
  }
  int failed = 0;
  const auto count = [&](const Transcript& t) {
    failed += !t.ok();
    print_transcript(t, o);
    std::cout.flush();
  };
  if (o.live) {
    for (const auto& path : o.audio) {
      Transcript t;
      try {
        t = transcribe_live(recognizer, path, o);
      } catch (const c10::Error& e) {
        t.audio = path;
        t.error = e.what_without_backtrace();
      } catch (const std::exception& e) {
        t.audio = path;
        t.error = e.what();
      }
      count(t);
    }
  } else {
    const auto batch = static_cast<size_t>(o.recognizer.encoder.batch_size);
    for (size_t start = 0; start < o.audio.size(); start += batch) {
      const std::vector<std::string> paths(
          o.audio.begin() + static_cast<std::ptrdiff_t>(start),
          o.audio.begin() + static_cast<std::ptrdiff_t>(std::min(start + batch, o.audio.size())));
      for (const auto& t : recognizer.transcribe(paths)) count(t);
    }
  }
  if (failed > 0) {
    std::cerr << "attnzoo transcribe: " << failed << " of " << o.audio.size() << " files failed\n";
    return 1;
  }
  return 0;
}

}  // namespace

Command add_transcribe_command(CLI::App& app) {
  auto o = std::make_shared<TranscribeOptions>();
  auto* sub = app.add_subcommand(
      "transcribe",
      "Speech to text with a Conformer that has a CTC head or a transducer (greedy or beam "
      "search)");
  add_model_options(sub, o->model, o->recognizer.encoder,
                    {"attnzoo", "torchaudio", "wenet", "espnet", "nemo"});
  sub->add_option("--units", o->recognizer.units,
                  "Token table (WeNet units.txt, or an ESPnet token list with --set "
                  "decoding.units_format=espnet); default: the config's decoding.units")
      ->check(CLI::ExistingFile);
  auto* greedy = sub->add_flag("--greedy", o->greedy,
                               "Greedy search (CTC: the best path; transducer: NeMo's greedy)");
  sub->add_option("--beam", o->beam,
                  "Beam search with this beam size (CTC: prefix beam search; transducer: "
                  "NeMo's beam search)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}))
      ->excludes(greedy);
  sub->add_option("--nbest", o->nbest, "Hypotheses per file (at most the beam size)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  sub->add_flag("--stream", o->stream,
                "Encode each file chunk by chunk through the streaming caches");
  sub->add_flag("--live", o->live,
                "Feed each file to a live stream in blocks and print the partial results");
  sub->add_option("--chunk", o->chunk,
                  "With --stream or --live: encoder frames per chunk (default: the config's "
                  "streaming.chunk_size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--block-ms", o->block_ms, "With --live: milliseconds of audio per push")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  sub->add_flag("--times", o->times, "Print each token's start and end time");
  add_device_options(sub, o->recognizer.encoder);
  sub->add_option("--threads", o->recognizer.encoder.threads, "LibTorch intra-op threads")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--batch-size", o->recognizer.encoder.batch_size,
                  "Files per forward pass (padded and masked)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  sub->add_flag("--json", o->json,
                "One JSON object per file and line: audio, text, score, confidence, tokens "
                "(token, id, start, end, confidence), nbest, seconds, ms; or audio, error. "
                "--live adds a line per partial result (audio, at, partial, best)");
  sub->add_option("audio", o->audio, "Audio files")->required();
  return {sub, [o] { return run_transcribe(*o); }};
}

}  // namespace attnzoo::cli
