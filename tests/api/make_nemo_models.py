"""Small NeMo ASR models saved by NeMo itself as .nemo files, and what NeMo makes of some speech:
the reference for running a .nemo file (tests/api/test_nemo_file.cpp).

    make_nemo_models.py AUDIO_DIR OUT_DIR

Each model is built by NeMo's own model class (the pinned nemo_toolkit, with NeMo's ASR
collection's imports from <venv>/nemo-asr and <venv>/espnet-inference: tools/setup.sh) from a
config written here in NeMo's keys, with random weights under a fixed seed, and saved with
`.save_to()`: the tar, model_config.yaml, model_weights.ckpt and the tokenizer files are NeMo's.
Before saving, the BatchNorm statistics and the norms are moved off identity and the CTC head is
made to read what varies between frames (sensitive_head), so that the tokens follow the input.

  ctc_bpe   EncDecCTCModelBPE, the FastConformer of NeMo's CTC BPE recipes, shrunk: 80 log-mel
            bins (25 ms / 10 ms, per-feature normalisation), dw_striding x8, rel_pos, xscaling,
            untied biases, BatchNorm, kernel 9; a 32-piece SentencePiece BPE tokenizer trained
            here by NeMo's create_spt_model.
  ctc_char  EncDecCTCModel (a character vocabulary in the config, no tokenizer files), with the
            other choices: 64 bins normalised over all features, striding x4, no xscaling, biases
            tied across layers, LayerNorm in the convolution module, kernel 5.

Audio: AUDIO_DIR/speech_16k.wav and other_voice_16k.wav (tests/preprocess/make_audio_reference.py,
espeak-ng), cut and mixed here into three utterances of 1.3 to 2.6 s.

Writes into OUT_DIR:
  <model>.nemo            as NeMo's save_to wrote it
  ctc_bpe_unpacked/       ctc_bpe.nemo unpacked (tarfile)
  ctc_char_gz.nemo        ctc_char.nemo gzipped, as NeMo before 1.7 wrote them
  waves/<wave>.wav        16 kHz mono, 16 bit
  nemo_reference.safetensors  "<model>/<wave>/features" [T, F] (the preprocessor's output cut to
                          its length), ".../encoded" [T', D], ".../log_probs" [T', V] (float32)
  manifest.json           versions; per model its target and vocabulary size, per wave the
                          greedy hypothesis of NeMo's transcribe(): text and token ids

Runs offline on the CPU: nothing is downloaded.
"""
import gzip
import json
import logging
import sys
import tarfile
import tempfile
import wave
from pathlib import Path

# NeMo's imports beyond the venv (tools/requirements/requirements-nemo-asr.txt).
for extra in ("nemo-asr", "espnet-inference"):
    sys.path.insert(0, str(Path(sys.prefix) / extra))
logging.disable(logging.WARNING)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

RATE = 16000
SEED = 20261206

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore",
    "pack my box with five dozen liquor jugs",
    "speech recognition in c plus plus without python",
    "seven eight nine zero one two three four five six",
]


def read_wav(path):
    with wave.open(str(path)) as w:
        if w.getframerate() != RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            sys.exit(f"{path}: expected 16 kHz mono 16-bit audio")
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return data.astype(np.float32) / 32768.0


def write_wav(path, samples):
    pcm = np.clip(np.round(samples * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    return pcm.astype(np.float32) / 32768.0  # what a reader of the file gets


def make_waves(audio_dir, out):
    speech = read_wav(Path(audio_dir) / "speech_16k.wav")
    other = read_wav(Path(audio_dir) / "other_voice_16k.wav")
    rng = np.random.default_rng(SEED)
    n = min(len(speech), len(other))
    mix = 0.6 * speech[:n] + 0.4 * other[:n] + 0.003 * rng.standard_normal(n).astype(np.float32)
    waves = {
        "speech": speech[: int(2.6 * RATE)],
        "other_voice": other[int(0.2 * RATE) : int(1.5 * RATE)],
        "mix": 0.8 * mix[: int(2.1 * RATE)] / max(1e-6, np.abs(mix).max()),
    }
    (out / "waves").mkdir(parents=True, exist_ok=True)
    return {name: write_wav(out / "waves" / f"{name}.wav", x) for name, x in waves.items()}


def preprocessor(features, normalize):
    return {
        "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
        "sample_rate": RATE, "normalize": normalize, "window_size": 0.025,
        "window_stride": 0.01, "window": "hann", "features": features, "n_fft": 512,
        "log": True, "frame_splicing": 1, "dither": 0.0, "pad_to": 0, "pad_value": 0.0,
    }


def encoder(features, **changes):
    e = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder",
        "feat_in": features, "feat_out": -1, "n_layers": 2, "d_model": 64,
        "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 32,
        "causal_downsampling": False, "ff_expansion_factor": 4,
        "self_attention_model": "rel_pos", "n_heads": 4, "att_context_size": [-1, -1],
        "att_context_style": "regular", "xscaling": True, "untie_biases": True,
        "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
        "conv_context_size": None, "dropout": 0.1, "dropout_pre_encoder": 0.1,
        "dropout_emb": 0.0, "dropout_att": 0.1,
    }
    e.update(changes)
    return e


def model_config(features, normalize, encoder_changes, tokenizer_dir=None, vocabulary=None):
    cfg = {
        "sample_rate": RATE,
        "train_ds": None, "validation_ds": None, "test_ds": None,
        "preprocessor": preprocessor(features, normalize),
        "encoder": encoder(features, **encoder_changes),
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": 64,
                    "num_classes": -1 if vocabulary is None else len(vocabulary),
                    "vocabulary": [] if vocabulary is None else vocabulary},
        "decoding": {"strategy": "greedy_batch"},
        "optim": None,
    }
    if tokenizer_dir is not None:
        cfg["tokenizer"] = {"dir": str(tokenizer_dir), "type": "bpe"}
    return cfg


def make_tokenizer(work):
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

    text = work / "text.txt"
    text.write_text("\n".join(SENTENCES * 4) + "\n")
    create_spt_model(str(text), vocab_size=32, sample_size=-1, do_lower_case=True,
                     tokenizer_type="bpe", output_dir=str(work / "tokenizer"))
    return work / "tokenizer"


def off_identity(model, generator):
    """Norms, BatchNorm statistics and the relative-position biases away from their
    initialisation (identity, zero)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.LayerNorm)):
                module.weight.copy_(1 + 0.3 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.05 * torch.randn(module.bias.shape, generator=generator))
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.copy_(0.2 * torch.randn(module.running_mean.shape,
                                                            generator=generator))
                module.running_var.copy_(0.5 + torch.rand(module.running_var.shape,
                                                          generator=generator))
        for name, parameter in model.named_parameters():
            if "pos_bias" in name:
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))


def sensitive_head(model, waves, generator):
    """The CTC head, made to read what varies between frames. A random encoder's frames share a
    large common part, so a random head gives one token everywhere: here the head is a random
    mix of the 16 principal directions of the encoded frames of `waves` (centred), scaled to
    logits of a few units, with the blank a little ahead, so that tokens follow the input."""
    frames = []
    with torch.no_grad():
        for x in waves.values():
            signal = torch.from_numpy(x)[None]
            features, length = model.preprocessor(input_signal=signal,
                                                  length=torch.tensor([signal.shape[1]]))
            encoded, n = model.encoder(audio_signal=features, length=length)
            frames.append(encoded[0, :, : int(n[0])].T)
        frames = torch.cat(frames)
        mean = frames.mean(0)
        _, singular, directions = torch.linalg.svd(frames - mean, full_matrices=False)
        k = min(16, directions.shape[0])
        basis = directions[:k] / singular[:k, None] * frames.shape[0] ** 0.5  # unit variance
        layer = model.decoder.decoder_layers[0]
        mix = torch.randn(layer.weight.shape[0], k, generator=generator)
        weight = 1.5 * mix @ basis
        layer.weight.copy_(weight[:, :, None])
        layer.bias.copy_(-weight @ mean)
        layer.bias[-1] += 2.0  # NeMo's blank is the last class


def reference(model, waves):
    """Per wave: the preprocessor's features, the encoder's output, the log-probabilities and
    NeMo's greedy transcription."""
    tensors, results = {}, {}
    for name, x in waves.items():
        signal = torch.from_numpy(x)[None]
        length = torch.tensor([signal.shape[1]])
        # transcribe() leaves the model in training mode (dropout on): eval again each time.
        model.eval()
        with torch.no_grad():
            features, feature_length = model.preprocessor(input_signal=signal, length=length)
            encoded, encoded_length = model.encoder(audio_signal=features, length=feature_length)
            log_probs = model.decoder(encoder_output=encoded)
        t, n = int(feature_length[0]), int(encoded_length[0])
        tensors[f"{name}/features"] = features[0, :, :t].T.contiguous()
        tensors[f"{name}/encoded"] = encoded[0, :, :n].T.contiguous()
        tensors[f"{name}/log_probs"] = log_probs[0, :n].contiguous()
        hypothesis = model.transcribe([x], batch_size=1, verbose=False)[0]
        # A CTC hypothesis's y_sequence is the best class of each frame; its tokens are those
        # with repeats merged and blanks (the last class) dropped.
        blank = log_probs.shape[-1] - 1
        frames = [int(i) for i in hypothesis.y_sequence]
        tokens = [k for i, k in enumerate(frames) if k != blank and (i == 0 or k != frames[i - 1])]
        results[name] = {"text": hypothesis.text, "token_ids": tokens, "frames": n}
    return tensors, results


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    waves = make_waves(sys.argv[1], out)

    import nemo
    from nemo.collections.asr.models import EncDecCTCModel, EncDecCTCModelBPE
    from omegaconf import OmegaConf

    characters = [" ", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o",
                  "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "'"]
    all_tensors, summary = {}, {"nemo_toolkit": nemo.__version__, "torch": torch.__version__,
                                "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = make_tokenizer(Path(tmp))
        models = {
            "ctc_bpe": (EncDecCTCModelBPE, model_config(80, "per_feature", {}, tokenizer)),
            "ctc_char": (EncDecCTCModel, model_config(
                64, "all_features",
                {"subsampling": "striding", "subsampling_factor": 4, "xscaling": False,
                 "untie_biases": False, "conv_norm_type": "layer_norm", "conv_kernel_size": 5},
                vocabulary=characters)),
        }
        for index, (name, (cls, cfg)) in enumerate(models.items()):
            torch.manual_seed(SEED + index)
            model = cls(cfg=OmegaConf.create(cfg), trainer=None)
            generator = torch.Generator().manual_seed(SEED + 100 + index)
            off_identity(model, generator)
            model.eval()
            sensitive_head(model, waves, generator)
            path = out / f"{name}.nemo"
            model.save_to(str(path))
            # What a user's file gives: the model as NeMo restores it.
            restored = cls.restore_from(str(path), map_location="cpu")
            restored.eval()
            tensors, results = reference(restored, waves)
            all_tensors.update({f"{name}/{key}": value for key, value in tensors.items()})
            summary["models"][name] = {
                "target": f"{cls.__module__}.{cls.__name__}",
                "vocabulary_size": int(restored.decoder.num_classes_with_blank),
                "waves": results,
            }
            print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters; "
                  + "; ".join(f"{w}: {r['frames']} frames, {r['text']!r}"
                              for w, r in results.items()), flush=True)
    # The same files as users also hold them: unpacked into a folder, and gzipped (NeMo before
    # 1.7 wrote .nemo files so, and still reads them).
    with tarfile.open(out / "ctc_bpe.nemo") as tar:
        tar.extractall(out / "ctc_bpe_unpacked", filter="data")
    (out / "ctc_char_gz.nemo").write_bytes(gzip.compress((out / "ctc_char.nemo").read_bytes(),
                                                         mtime=0))
    save_file(all_tensors, str(out / "nemo_reference.safetensors"))
    (out / "manifest.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
