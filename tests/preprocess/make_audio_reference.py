"""Reference features for the audio frontend's tests (a CTest fixture).

    make_audio_reference.py OUT_DIR
    make_audio_reference.py --signals IN.safetensors OUT.safetensors

The first form writes into OUT_DIR:
  audio/      speech synthesised with espeak-ng (Debian's package; its output is 22.05 kHz mono
              16-bit), written with Python's wave module as
                speech_16k.wav          16 kHz mono (resampled here with torchaudio)
                speech_22k_stereo.wav   22.05 kHz stereo: the speech and, on the right, a quieter
                                        copy 40 samples late, so that the downmix matters
                speech_44k_stereo.wav   the same at 44.1 kHz
                noise_16k.wav           white noise, 2 s, seeded
                silence_16k.wav         1 s of zeros
                loud_16k.wav, quiet_16k.wav, clipped_16k.wav, noisy_16k.wav
                                        the speech at full scale, at -50 dBFS, driven 4x into
                                        clipping, and under white noise at about 6 dB SNR
                tones_16k.wav           100 Hz, 1 kHz and 5 kHz sines, each 40 dB below the last
                other_voice_16k.wav     another voice and rate (en-gb+m3, 150 words/minute)
  fbank.safetensors    for each option set of SETS and each 16 kHz signal: kaldi-native-fbank's
                       features ("<set>/<signal>/knf"), torchaudio.compliance.kaldi.fbank's
                       ("/torchaudio"), both in float32 as they run, and torchaudio's in float64
                       with its mel filters in float64 too ("/float64"; by default it builds them
                       in float32), the oracle of the precision rule of the tests;
  whisper.safetensors  openai-whisper's log_mel_spectrogram (whisper/audio.py of the pinned
                       package, loaded without the package's __init__) with 80 and 128 bins, and
                       numpy_log_mel() below, OUR transcription of it with librosa's Slaney
                       filters, for the sizes Whisper ships no filters for;
  stft.safetensors     ESPnet's default frontend (STFT log-mel) as torchaudio's MelSpectrogram
                       computes it, in float32 and float64, for a few sizes and mel ranges;
  manifest.json        the option sets (AudioFeatureOptions field names), the signals, the
                       Whisper and the STFT log-mel cases.

The stereo files are resampled and downmixed by the frontend under test, so their references
are computed on the frontend's own 16 kHz mono signal: the C++ test writes that signal to a
safetensors file and runs the second form, which computes every option set on each signal of
IN (16 kHz float32, keyed by name) into OUT, keyed as above.
"""
import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import types
import wave
from pathlib import Path

import kaldi_native_fbank as knf
import numpy as np
import torch
import torchaudio
import torchaudio.functional as AF
from safetensors.torch import load_file, save_file
from torchaudio.compliance import kaldi

RATE = 16000
TEXT = ("The quick brown fox jumps over the lazy dog. "
        "Seven slim swans swam silently, while thirty thin thistles shook.")

# Option sets, in the names of AudioFeatureOptions (preprocess/audio/fbank.h); the rest keep the
# defaults of configs' AudioFeaturesConfig (Kaldi's, dither 0, energy_floor 0, 80 bins).
DEFAULTS = dict(num_mel_bins=80, frame_length_ms=25.0, frame_shift_ms=10.0, preemphasis=0.97,
                remove_dc_offset=True, window="povey", snip_edges=True, energy_floor=0.0,
                low_freq=20.0, high_freq=0.0, int16_scale=True)
SETS = {
    "default": {},
    "snip_edges_false": dict(snip_edges=False),
    "hamming": dict(window="hamming"),
    "hanning": dict(window="hanning"),
    "blackman": dict(window="blackman"),
    "rectangular": dict(window="rectangular", snip_edges=False),
    "high_freq_negative": dict(high_freq=-400.0, low_freq=64.0, num_mel_bins=40),
    "no_dc_removal": dict(remove_dc_offset=False),
    "energy_floor": dict(energy_floor=1.0),
    "unscaled_other_frames": dict(int16_scale=False, preemphasis=0.0, num_mel_bins=23,
                                  frame_length_ms=32.0, frame_shift_ms=12.5),
}


def options(name):
    o = dict(DEFAULTS)
    o.update(SETS[name])
    return o


def knf_fbank(x, o):
    opts = knf.FbankOptions()
    f = opts.frame_opts
    f.samp_freq = RATE
    f.frame_length_ms = o["frame_length_ms"]
    f.frame_shift_ms = o["frame_shift_ms"]
    f.dither = 0.0  # kaldi-native-fbank's default is 3e-5
    f.preemph_coeff = o["preemphasis"]
    f.remove_dc_offset = o["remove_dc_offset"]
    f.window_type = o["window"]
    f.snip_edges = o["snip_edges"]
    f.round_to_power_of_two = True
    opts.mel_opts.num_bins = o["num_mel_bins"]
    opts.mel_opts.low_freq = o["low_freq"]
    opts.mel_opts.high_freq = o["high_freq"]
    opts.energy_floor = o["energy_floor"]
    opts.use_energy = False
    fbank = knf.OnlineFbank(opts)
    scale = 32768.0 if o["int16_scale"] else 1.0
    fbank.accept_waveform(RATE, (x.astype(np.float32) * scale).tolist())
    fbank.input_finished()
    return torch.from_numpy(np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)]))


def torchaudio_fbank(x, o, dtype):
    scale = 32768.0 if o["int16_scale"] else 1.0
    wave_ = torch.from_numpy(x.astype(np.float32)).to(dtype).unsqueeze(0) * scale
    return kaldi.fbank(wave_, num_mel_bins=o["num_mel_bins"], frame_length=o["frame_length_ms"],
                       frame_shift=o["frame_shift_ms"], dither=0.0,
                       preemphasis_coefficient=o["preemphasis"],
                       remove_dc_offset=o["remove_dc_offset"], window_type=o["window"],
                       snip_edges=o["snip_edges"], energy_floor=o["energy_floor"],
                       low_freq=o["low_freq"], high_freq=o["high_freq"], sample_frequency=RATE)


def fbank_references(signals):
    out = {}
    for name in SETS:
        o = options(name)
        for signal, x in signals.items():
            out[f"{name}/{signal}/knf"] = knf_fbank(x, o).float()
            out[f"{name}/{signal}/torchaudio"] = torchaudio_fbank(x, o, torch.float32).float()
            # torchaudio builds its mel filters in the default dtype: float64 for the oracle.
            default = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            try:
                out[f"{name}/{signal}/float64"] = torchaudio_fbank(x, o, torch.float64).double()
            finally:
                torch.set_default_dtype(default)
    return {k: v.contiguous() for k, v in out.items()}


def whisper_audio_module():
    """whisper/audio.py of the installed openai-whisper, imported without whisper/__init__.py."""
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("openai-whisper is not installed (tools/requirements/requirements-nodeps.txt; run "
                 "tools/setup.sh)")
    package = types.ModuleType("whisper")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["whisper"] = package
    return importlib.import_module("whisper.audio")


# --- OUR numpy transcription of Whisper's log-mel (not openai-whisper's code) ------------------
def slaney_hz_to_mel(f):
    """librosa.hz_to_mel(htk=False), transcribed."""
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    logstep = np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_hz / f_sp + np.log(np.maximum(f, 1e-300) / min_log_hz)
                    / logstep, f / f_sp)


def slaney_mel_to_hz(m):
    """librosa.mel_to_hz(htk=False), transcribed."""
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def librosa_mel_filters(sr, n_fft, n_mels):
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels) (fmin 0, fmax sr/2, Slaney norm),
    transcribed in numpy; float64."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = slaney_mel_to_hz(np.linspace(slaney_hz_to_mel(0.0), slaney_hz_to_mel(sr / 2.0),
                                         n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]


def numpy_log_mel(x, sr, n_fft, hop, n_mels):
    """whisper.audio.log_mel_spectrogram's formula, transcribed in numpy (float64): centred
    frames with reflect padding, periodic hann, |rfft|^2, the last frame dropped, Slaney mel,
    log10(max(., 1e-10)), max(x, max - 8), (x + 4) / 4. Returns [n_mels, frames]."""
    x = np.asarray(x, dtype=np.float64)
    padded = np.pad(x, n_fft // 2, mode="reflect")
    frames = 1 + (len(padded) - n_fft) // hop
    index = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    power = np.abs(np.fft.rfft(padded[index] * window, axis=1)) ** 2
    mel = librosa_mel_filters(sr, n_fft, n_mels) @ power[:-1].T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0
# ----------------------------------------------------------------------------------------------


def write_wav(path, samples, rate):
    """samples: [N] or [N, C] float in [-1, 1] -> 16-bit PCM WAV (rounded, clipped)."""
    a = np.asarray(samples, dtype=np.float64)
    a = a[:, None] if a.ndim == 1 else a
    pcm = np.clip(np.round(a * 32768.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(a.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return pcm.astype(np.float32) / 32768.0  # what a reader gets back


def read_wav(path):
    with wave.open(str(path), "rb") as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return pcm.reshape(-1, w.getnchannels()).astype(np.float32) / 32768.0, w.getframerate()


def espeak(text, path, *voice):
    if shutil.which("espeak-ng") is None:
        sys.exit("espeak-ng not found: the speech of the audio tests is synthesised with Debian's "
                 "espeak-ng package (tools/setup.sh installs it)")
    subprocess.run(["espeak-ng", *voice, "-w", str(path), text], check=True)
    x, rate = read_wav(path)
    return x[:, 0], rate


def make_all(out):
    audio = out / "audio"
    audio.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        speech, speech_rate = espeak(TEXT, Path(tmp) / "espeak.wav")
        other, other_rate = espeak(TEXT, Path(tmp) / "other.wav", "-v", "en-gb+m3", "-s", "150")
    if speech_rate != 22050 or other_rate != 22050:
        sys.exit(f"espeak-ng wrote {speech_rate} Hz audio; this script expects 22050 Hz")
    speech = speech / max(1e-9, np.abs(speech).max()) * 0.8  # a loud, realistic level
    t = torch.from_numpy(speech.astype(np.float32))
    speech16 = AF.resample(t, 22050, RATE).numpy()
    speech44 = AF.resample(t, 22050, 44100).numpy()

    def stereo(x, delay):
        right = 0.6 * np.concatenate([np.zeros(delay, np.float32), x[:-delay]])
        return np.stack([x, right], axis=1)

    signals = {
        "speech_16k": write_wav(audio / "speech_16k.wav", speech16, RATE)[:, 0],
        "noise_16k": write_wav(audio / "noise_16k.wav",
                               np.random.default_rng(6).normal(0.0, 0.1, 2 * RATE), RATE)[:, 0],
        "silence_16k": write_wav(audio / "silence_16k.wav", np.zeros(RATE), RATE)[:, 0],
    }
    # Levels and kinds of signal the fbank's precision claim must hold on (2 s of each).
    rng = np.random.default_rng(7)
    two = speech16[: 2 * RATE]
    t = np.arange(2 * RATE) / RATE
    varied = {
        "loud_16k": two / max(1e-9, np.abs(two).max()) * (32767.0 / 32768.0),
        "quiet_16k": two / max(1e-9, np.abs(two).max()) * 10 ** (-50 / 20),
        "clipped_16k": np.clip(two * 4.0, -1.0, 32767.0 / 32768.0),
        "noisy_16k": two + rng.normal(0.0, 0.5 * np.sqrt(np.mean(two**2)), two.shape),
        "tones_16k": 0.5 * np.sin(2 * np.pi * 100 * t) + 5e-3 * np.sin(2 * np.pi * 1000 * t)
        + 5e-5 * np.sin(2 * np.pi * 5000 * t),
        "other_voice_16k": AF.resample(torch.from_numpy(other.astype(np.float32)), 22050,
                                       RATE).numpy() * 0.8 / max(1e-9, np.abs(other).max()),
    }
    for name, x in varied.items():
        signals[name] = write_wav(audio / f"{name}.wav", x, RATE)[:, 0]
    write_wav(audio / "speech_22k_stereo.wav", stereo(speech, 40), 22050)
    write_wav(audio / "speech_44k_stereo.wav", stereo(speech44, 80), 44100)
    save_file(fbank_references(signals), str(out / "fbank.safetensors"))

    whisper = whisper_audio_module()
    cases, tensors = {}, {}
    for signal in signals:
        for bins in (80, 128):  # the filters openai-whisper ships
            key = f"{signal}/whisper{bins}"
            x = torch.from_numpy(signals[signal])
            tensors[key] = whisper.log_mel_spectrogram(x, n_mels=bins).T.contiguous().float()
            cases[key] = dict(signal=signal, sample_rate=RATE, num_mel_bins=bins,
                              frame_length_ms=25.0, frame_shift_ms=10.0, reference="openai-whisper")
    for signal, bins, rate, length_ms in (("speech_16k", 64, RATE, 25.0),
                                          ("speech_16k", 80, RATE, 32.0),
                                          ("noise_16k", 40, RATE, 25.0)):
        key = f"{signal}/numpy{bins}_{int(length_ms)}ms"
        n_fft, hop = int(rate * 0.001 * length_ms), int(rate * 0.001 * 10.0)
        tensors[key] = torch.from_numpy(numpy_log_mel(signals[signal], rate, n_fft, hop, bins).T
                                        .copy())
        cases[key] = dict(signal=signal, sample_rate=rate, num_mel_bins=bins,
                          frame_length_ms=length_ms, frame_shift_ms=10.0,
                          reference="numpy transcription (ours)")
    save_file(tensors, str(out / "whisper.safetensors"))

    # ESPnet's DefaultFrontend (Stft + LogMel): torchaudio's MelSpectrogram is the same
    # computation (torch.stft centred with reflect padding, a periodic hann window of win_length
    # centred in n_fft, |X|^2, librosa's Slaney filters), then ln(max(x, 1e-10)); float32 as
    # ESPnet runs it, and float64 throughout (torchaudio builds its filters in the default dtype:
    # in float32 some entries are 0.2% off).
    stft_cases, stft_tensors = {}, {}
    for signal, bins, n_fft, win, hop, fmin, fmax in (
            ("speech_16k", 80, 512, 400, 160, 0.0, None),   # ESPnet's LibriSpeech recipes
            ("speech_16k", 80, 512, 512, 128, 0.0, None),   # DefaultFrontend's defaults
            ("noise_16k", 40, 400, 320, 160, 20.0, 7600.0),
            ("tones_16k", 23, 256, 200, 80, 50.0, 6000.0)):
        key = f"{signal}/stft{bins}_{n_fft}_{win}_{hop}"
        for suffix, dtype in (("torchaudio", torch.float32), ("float64", torch.float64)):
            torch.set_default_dtype(dtype)
            mel = torchaudio.transforms.MelSpectrogram(
                sample_rate=RATE, n_fft=n_fft, win_length=win, hop_length=hop, f_min=fmin,
                f_max=fmax, n_mels=bins, window_fn=torch.hann_window, power=2.0, center=True,
                pad_mode="reflect", norm="slaney", mel_scale="slaney")
            x = torch.from_numpy(signals[signal]).to(dtype)
            stft_tensors[f"{key}/{suffix}"] = mel(x).clamp(min=1e-10).log().T.contiguous()
            torch.set_default_dtype(torch.float32)
        stft_cases[key] = dict(signal=signal, sample_rate=RATE, num_mel_bins=bins, n_fft=n_fft,
                               frame_length_ms=1000.0 * win / RATE,
                               frame_shift_ms=1000.0 * hop / RATE, low_freq=fmin,
                               high_freq=fmax or 0.0)
    save_file(stft_tensors, str(out / "stft.safetensors"))

    manifest = {
        "sets": {name: options(name) for name in SETS},
        "signals": {name: f"audio/{name}.wav" for name in signals},
        "stereo": {"speech_22k_stereo": "audio/speech_22k_stereo.wav",
                   "speech_44k_stereo": "audio/speech_44k_stereo.wav"},
        "whisper": cases,
        "stft": stft_cases,
        "espeak_text": TEXT,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"wrote {len(signals)} signals x {len(SETS)} option sets, {len(cases)} Whisper cases "
          f"to {out}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--signals":
        signals = {k: v.float().numpy() for k, v in load_file(sys.argv[2]).items()}
        save_file(fbank_references(signals), sys.argv[3])
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    make_all(Path(sys.argv[1]))


if __name__ == "__main__":
    main()
