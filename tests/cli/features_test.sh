#!/usr/bin/env bash
# features_test.sh CASE ATTNZOO_BINARY PYTHON REFERENCE_DIR CONFIGS_DATA_DIR: `attnzoo features`
# against the references of the audio frontend's fixture (tests/preprocess/
# make_audio_reference.py: espeak-ng speech, kaldi-native-fbank, torchaudio, openai-whisper) and
# its refusals of bad input.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 ref=$4 data=$5
# compare OUTPUT REFERENCE_FILE TOLERANCE KEY...: features[i, :lengths[i]] against
# REFERENCE_FILE[KEY_i] (max abs diff <= TOLERANCE; KEY "-" skips the entry), zeros after it.
compare() {
  "$py" - "$@" <<'EOF' || exit 1
import sys
import torch
from safetensors.torch import load_file

path, reference, tolerance, keys = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
ours, theirs = load_file(path), load_file(reference)
if sorted(ours) != ["features", "lengths"]:
    sys.exit(f"FAIL: {path} holds {sorted(ours)}, expected features and lengths")
features, lengths = ours["features"], ours["lengths"]
if lengths.dtype != torch.int64 or features.dtype != torch.float32 or features.dim() != 3:
    sys.exit(f"FAIL: features {features.dtype} {tuple(features.shape)}, lengths {lengths.dtype}")
if features.shape[0] != len(keys) or int(lengths.max()) != features.shape[1]:
    sys.exit(f"FAIL: features {tuple(features.shape)}, lengths {lengths.tolist()}")
for i, key in enumerate(keys):
    n = int(lengths[i])
    if features[i, n:].abs().max().item() if n < features.shape[1] else 0.0:
        sys.exit(f"FAIL: entry {i} is not zero after its {n} frames")
    if key == "-":
        continue
    expected = theirs[key]
    if tuple(expected.shape) != (n, features.shape[2]):
        sys.exit(f"FAIL: {key}: {n} frames of {features.shape[2]}, reference {tuple(expected.shape)}")
    d = (features[i, :n].double() - expected.double()).abs().max().item()
    print(f"{key}: {n} frames, max |features - reference| = {d:.2e}")
    if not d <= tolerance:
        sys.exit(f"FAIL: {key} differs by {d}")
EOF
}

audio=$ref/audio
o=$out/features.safetensors
case "$case_name" in
  features_bench)
    # `attnzoo bench features`: every timed call in the JSON, and the features it timed equal
    # those `attnzoo features` writes; a file at another rate is refused, naming it.
    run 0 bench features "$audio/speech_16k.wav" --iterations 2 --warmup 0 --threads 1 \
      --json "$out/bench.json" --output "$out/bench.safetensors"
    expect stdout '^  samples in memory: median [0-9.]+ ms, min [0-9.]+ ms \(RTF [0-9.]+\)$'
    expect stdout '^  from the file: +median [0-9.]+ ms'
    run 0 features --model conformer_s "$audio/speech_16k.wav" --out "$o"
    "$py" - "$out/bench.json" "$out/bench.safetensors" "$o" <<'PY' || exit 1
import json, statistics, sys
import torch
from safetensors.torch import load_file
j = json.load(open(sys.argv[1]))
assert len(j["memory_ms"]) == 2 and len(j["file_ms"]) == 2 and j["threads"] == 1, j
assert j["memory_median_ms"] == statistics.median(j["memory_ms"]), j
timed, features = load_file(sys.argv[2])["features"], load_file(sys.argv[3])["features"][0]
assert j["frames"] == timed.shape[0] == features.shape[0], (j["frames"], timed.shape, features.shape)
assert torch.equal(timed, features), "bench features timed other features"
PY
    run 1 bench features "$audio/speech_44k_stereo.wav" --iterations 1
    expect stderr 'speech_44k_stereo.wav: sampled at 44100 Hz; .*16000 Hz'
    run 1 bench features "$out/missing.wav" --iterations 1
    expect stderr 'missing.wav'
    ;;
  features_zoo)
    # A registered name (WeNet's LibriSpeech Conformer: 80-bin Kaldi fbank, 16 kHz) on a 16 kHz
    # file, the 44.1 kHz stereo file (downmixed, resampled) and silence. The reference is
    # torchaudio's fbank in float64 (ours is float64 rounded to float32).
    run 0 features --model wenet_conformer_librispeech "$audio/speech_16k.wav" \
      "$audio/speech_44k_stereo.wav" "$audio/silence_16k.wav" --out "$o"
    expect stdout '^.*/speech_16k.wav: WAV PCM 16-bit, 16000 Hz, 1 channel, [0-9.]+ s -> [0-9]+ frames$'
    expect stdout '^.*/speech_44k_stereo.wav: WAV PCM 16-bit, 44100 Hz, 2 channels, [0-9.]+ s -> [0-9]+ frames$'
    expect stdout '^wenet_conformer_librispeech \(.*wenet_conformer_librispeech.yaml\): Kaldi fbank: 80 mel bins 20-8000 Hz, 25 ms frames \(400 samples, FFT 512\) every 10 ms \(160 samples\) at 16000 Hz, povey window, preemphasis 0.97, dc offset removed, snip_edges true, dither 0, int16 scale$'
    expect stdout "^features \[3, [0-9]+, 80\], lengths \[3\] -> .*features.safetensors$"
    compare "$o" "$ref/fbank.safetensors" 1e-5 default/speech_16k/float64 - default/silence_16k/float64
    ;;
  features_overrides)
    # --set before the files: another window, and Whisper's log-mel instead of fbank.
    run 0 features --model wenet_conformer_librispeech --set features.window=hamming \
      "$audio/noise_16k.wav" "$audio/speech_16k.wav" --out "$o"
    compare "$o" "$ref/fbank.safetensors" 1e-5 hamming/noise_16k/float64 hamming/speech_16k/float64
    # (conformer_s: its features section has only the keys both kinds share)
    run 0 features --model conformer_s --set features.kind=whisper_log_mel \
      "$audio/speech_16k.wav" --out "$o"
    expect stdout 'Whisper log-mel: 80 Slaney mel bins, n_fft 400, hop 160 at 16000 Hz'
    compare "$o" "$ref/whisper.safetensors" 1e-4 speech_16k/whisper80
    # One channel of the stereo file; a YAML file of another size (20 bins).
    run 0 features --model "$data/conformer_micro_stream.yaml" --channel 1 \
      "$audio/speech_22k_stereo.wav" --out "$o"
    expect stdout "^features \[1, [0-9]+, 20\], lengths \[1\] -> "
    ;;
  features_bad_input)
    good=$audio/speech_16k.wav
    : >"$out/empty.wav"
    echo "This is not audio at all." >"$out/text.wav"
    head -c 100000 "$good" >"$out/truncated.wav"
    "$py" -c "import wave, sys; w = wave.open(sys.argv[1], 'wb'); w.setnchannels(1); w.setsampwidth(2); \
w.setframerate(16000); w.writeframes(bytes(2 * 160)); w.close()" "$out/short.wav"
    for bad in missing.wav empty.wav text.wav truncated.wav short.wav; do
      case $bad in
        missing.wav) why='no such file' ;;
        empty.wav) why='empty file \(0 bytes\)' ;;
        text.wav) why='not audio in a supported format \(WAV, FLAC, Ogg Vorbis/Opus, MP3\); it starts with 54 68 69 73 20 69 73 20' ;;
        truncated.wav) why='truncated WAV: the data chunk announces [0-9]+ bytes, the file holds 99956 after its header \(was the download or copy interrupted\?\)' ;;
        short.wav) why='too short: 160 samples \(10 ms at 16000 Hz\); one frame needs 400 samples \(25 ms frames, snip_edges true\)' ;;
      esac
      refused 1 "^attnzoo features: .*/$bad: $why$" \
        features --model wenet_conformer_librispeech "$good" "$out/$bad" --out "$o"
    done
    refused 1 "^attnzoo features: .*/speech_16k.wav: has 1 channel; channel 1 was asked for \(channels count from 0\)$" \
      features --model wenet_conformer_librispeech --channel 1 "$good" --out "$o"
    not_written "$o"
    ;;
  features_bad_args)
    good=$audio/speech_16k.wav
    refused 2 '^attnzoo: .*audio' features --model wenet_conformer_librispeech --out "$o"
    refused 2 '^attnzoo: .*--out' features --model wenet_conformer_librispeech "$good"
    refused 2 '^attnzoo: .*--channel' features --model wenet_conformer_librispeech --channel -1 "$good" --out "$o"
    refused 1 "^attnzoo features: espnet_conformer_librispeech \(.*espnet_conformer_librispeech.yaml\): the config has no features section; the model takes features made elsewhere$" \
      features --model espnet_conformer_librispeech "$good" --out "$o"
    refused 1 "^attnzoo features: vit_base_patch16_224 is a vit model; features prepares audio for speech models$" \
      features --model vit_base_patch16_224 "$good" --out "$o"
    refused 1 "^attnzoo features: .*wenet_conformer_librispeech.yaml: override 'features.window=hann': features.window: " \
      features --model wenet_conformer_librispeech --set features.window=hann "$good" --out "$o"
    not_written "$o"
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
