"""NeMo's log-mel frontend as the reference of features kind nemo_mel (a CTest fixture).

    make_nemo_mel_reference.py AUDIO_REFERENCE_DIR OUT_DIR

Runs FilterbankFeatures, the module inside NeMo's AudioToMelSpectrogramPreprocessor
(nemo/collections/asr/parts/preprocessing/features.py of the pinned nemo_toolkit), in eval mode
(no dither, as NeMo at inference) on the signals make_audio_reference.py wrote into
AUDIO_REFERENCE_DIR, for the option sets in CASES (NeMo's preprocessor keys, as a .nemo file's
model_config.yaml states them). Writes into OUT_DIR:
  nemo_mel.safetensors  "<case>/<signal>/nemo": NeMo's features as it runs (float32), cut to its
                        valid length and transposed to [frames, bins];
                        "<case>/<signal>/float64": the same module with its window and mel filters
                        built in float64 and the signal in float64, the oracle of precision (NeMo
                        builds them in float32);
  manifest.json         per case: NeMo's keys ("nemo") and the same set in AudioFeatureOptions'
                        field names ("options"), and the signals.

features.py is loaded by path without NeMo's package __init__ (which imports Lightning, Hydra and
much more that the frontend never uses). Its three NeMo imports are replaced by stand-ins:
AudioAugmentor and AudioSegment (used only by WaveformFeaturizer, not by FilterbankFeatures) and
nemo.utils.logging (Python's logging). librosa, which builds the mel filters, lives in
<venv>/espnet-inference (tools/setup.sh).
"""
import importlib.util
import json
import logging
import sys
import types
import wave
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(sys.prefix) / "espnet-inference"))
import librosa  # noqa: E402

RATE = 16000
SIGNALS = ("speech_16k", "other_voice_16k", "loud_16k", "quiet_16k", "clipped_16k", "noisy_16k",
           "noise_16k", "tones_16k", "silence_16k")

# AudioToMelSpectrogramPreprocessor's keys; the rest keep its defaults (DEFAULTS).
DEFAULTS = dict(sample_rate=RATE, window_size=0.02, window_stride=0.01, window="hann",
                normalize="per_feature", n_fft=None, preemph=0.97, features=64, lowfreq=0,
                highfreq=None, log=True, log_zero_guard_type="add", log_zero_guard_value=2**-24,
                dither=1e-5, pad_to=16, frame_splicing=1, exact_pad=False, pad_value=0,
                mag_power=2.0, mel_norm="slaney")
CASES = {
    # The Parakeet / FastConformer ASR configs: 25 ms / 10 ms, 512-point FFT, per-feature
    # normalisation, 80 or 128 bins, no padding.
    "fastconformer80": dict(window_size=0.025, features=80, n_fft=512, pad_to=0),
    "fastconformer128": dict(window_size=0.025, features=128, n_fft=512, pad_to=0),
    # The cache-aware streaming FastConformers: no normalisation ("NA").
    "streaming": dict(window_size=0.025, features=80, n_fft=512, normalize="NA", pad_to=0),
    # The other choices of each key.
    "all_features_hamming": dict(window="hamming", normalize="all_features", mel_norm=None,
                                 mag_power=1.0, log_zero_guard_type="clamp",
                                 log_zero_guard_value="tiny", features=40),
    "exact_pad_bartlett": dict(window_size=0.025, window="bartlett", exact_pad=True, n_fft=400,
                               preemph=None, lowfreq=60, highfreq=7600, normalize="NA",
                               log_zero_guard_value="eps"),
    "blackman_linear": dict(window="blackman", window_stride=0.0125, log=False, normalize="NA",
                            features=40, lowfreq=100, highfreq=7000),
}


def nemo_features_module():
    spec = importlib.util.find_spec("nemo")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("nemo_toolkit is not installed (tools/requirements/requirements-nodeps.txt; run "
                 "tools/setup.sh)")
    path = Path(spec.submodule_search_locations[0]) / "collections/asr/parts/preprocessing/features.py"

    def stand_in(name, **attrs):
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module

    stand_in("nemo.collections.asr.parts.preprocessing.perturb", AudioAugmentor=object)
    stand_in("nemo.collections.asr.parts.preprocessing.segment", AudioSegment=object)
    stand_in("nemo.utils", logging=logging.getLogger("nemo"))
    module_spec = importlib.util.spec_from_file_location("nemo_asr_features", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def case_keys(name):
    keys = dict(DEFAULTS)
    keys.update(CASES[name])
    return keys


def guard_value(keys):
    """log_zero_guard_value as NeMo resolves it for float32 features."""
    value = keys["log_zero_guard_value"]
    if value == "tiny":
        return float(torch.finfo(torch.float32).tiny)
    if value == "eps":
        return float(torch.finfo(torch.float32).eps)
    return float(value)


def featurizer(features, keys):
    """FilterbankFeatures as AudioToMelSpectrogramPreprocessor builds it from its keys."""
    return features.FilterbankFeatures(
        sample_rate=keys["sample_rate"],
        n_window_size=int(keys["window_size"] * keys["sample_rate"]),
        n_window_stride=int(keys["window_stride"] * keys["sample_rate"]),
        window=keys["window"], normalize=keys["normalize"], n_fft=keys["n_fft"],
        preemph=keys["preemph"], nfilt=keys["features"], lowfreq=keys["lowfreq"],
        highfreq=keys["highfreq"], log=keys["log"],
        log_zero_guard_type=keys["log_zero_guard_type"],
        log_zero_guard_value=keys["log_zero_guard_value"], dither=keys["dither"],
        pad_to=keys["pad_to"], frame_splicing=keys["frame_splicing"],
        exact_pad=keys["exact_pad"], pad_value=keys["pad_value"], mag_power=keys["mag_power"],
        mel_norm=keys["mel_norm"]).eval()


def in_float64(module, keys):
    """The module with its window and filters rebuilt in float64 (the STFT call is NeMo's, without
    its cast of the window to float32) and a numeric log guard (NeMo's "tiny"/"eps" would take
    float64's)."""
    windows = {"hann": torch.hann_window, "hamming": torch.hamming_window,
               "blackman": torch.blackman_window, "bartlett": torch.bartlett_window}
    module.window = windows[keys["window"]](module.win_length, periodic=False,
                                            dtype=torch.float64)
    highfreq = keys["highfreq"] or keys["sample_rate"] / 2
    module.fb = torch.tensor(librosa.filters.mel(
        sr=keys["sample_rate"], n_fft=module.n_fft, n_mels=keys["features"], fmin=keys["lowfreq"],
        fmax=highfreq, norm=keys["mel_norm"]), dtype=torch.float64).unsqueeze(0)
    module.log_zero_guard_value = guard_value(keys)
    module.stft = lambda x: torch.stft(
        x, n_fft=module.n_fft, hop_length=module.hop_length, win_length=module.win_length,
        center=not module.exact_pad, window=module.window, return_complex=True,
        pad_mode="constant")
    return module


def our_options(keys):
    """The set in AudioFeatureOptions' names (preprocess/audio/feature_options.h)."""
    windows = {"hann": "hanning", "hamming": "hamming", "blackman": "blackman",
               "bartlett": "bartlett"}
    normalize = keys["normalize"] if keys["normalize"] in ("per_feature", "all_features") else "none"
    highfreq = keys["highfreq"] or 0.0
    return dict(kind="nemo_mel", sample_rate=keys["sample_rate"], num_mel_bins=keys["features"],
                frame_length_ms=1000.0 * keys["window_size"],
                frame_shift_ms=1000.0 * keys["window_stride"], window=windows[keys["window"]],
                n_fft=keys["n_fft"] or 0, preemphasis=keys["preemph"] or 0.0,
                low_freq=float(keys["lowfreq"]), high_freq=float(highfreq),
                mel_norm="slaney" if keys["mel_norm"] == "slaney" else "none",
                mag_power=keys["mag_power"], log=keys["log"],
                log_guard=keys["log_zero_guard_type"], log_guard_value=guard_value(keys),
                normalize=normalize, exact_pad=keys["exact_pad"])


def read_wav(path):
    with wave.open(str(path), "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2 or w.getframerate() != RATE:
            sys.exit(f"{path}: expected 16 kHz mono 16-bit PCM")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return pcm.astype(np.float32) / 32768.0


def run(module, x, dtype):
    signal = torch.from_numpy(x).to(dtype).unsqueeze(0)
    with torch.no_grad():
        features, length = module(signal, torch.tensor([signal.shape[1]]))
    return features[0, :, : int(length[0])].T.contiguous()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    audio_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    manifest_in = json.loads((audio_dir / "manifest.json").read_text())
    features = nemo_features_module()
    signals = {name: read_wav(audio_dir / manifest_in["signals"][name]) for name in SIGNALS}
    tensors, cases = {}, {}
    for name in CASES:
        keys = case_keys(name)
        nemo32 = featurizer(features, keys)
        nemo64 = in_float64(featurizer(features, keys), keys)
        for signal, x in signals.items():
            tensors[f"{name}/{signal}/nemo"] = run(nemo32, x, torch.float32).float()
            tensors[f"{name}/{signal}/float64"] = run(nemo64, x, torch.float64).double()
        cases[name] = dict(nemo={k: v for k, v in keys.items()}, options=our_options(keys))
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "nemo_mel.safetensors"))
    manifest = dict(cases=cases, signals={name: str(audio_dir / manifest_in["signals"][name])
                                          for name in SIGNALS})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"wrote {len(CASES)} NeMo preprocessor cases x {len(signals)} signals to {out}")


if __name__ == "__main__":
    main()
