"""An ESPnet2 recipe directory as training leaves it, for two tiny random-weight (seeded) ASR
models, with the waveforms to decode and what ESPnet's own Speech2Text makes of them: the
reference for loading an ESPnet experiment folder (config.yaml, valid.acc.ave.pth, the
recipe-relative feats_stats.npz and bpe.model) and decoding it CTC-only.

Everything ESPnet writes is written by ESPnet (the pinned PyPI `espnet`): each config.yaml by
`ASRTask.main(... --dry_run true)` run from the recipe directory, with the options asr.sh passes
(so token_list ends up inline and stats_file / bpemodel stay relative to the recipe directory);
each model is built from that config.yaml by ASRTask's builder and saved as training saves it,
torch.save(model.state_dict()). The weights are PyTorch's initialisation under a fixed seed, with
the norms and BatchNorm statistics moved off identity and the CTC head scaled up, so that the
outputs depend on the input.

  asr_train_char  conformer (rel_pos "latest", Conv2d x4, macaron, cnn kernel 5), 16 dims,
                  CTC only (no decoder), char tokens; frontend n_fft 512, win 400, hop 160,
                  20 mels; global MVN.
  asr_train_bpe   the same family, 24 dims, with a 1-block transformer decoder (ctc_weight 0.3,
                  ignored here: CTC-only decoding); sentencepiece unigram tokens (30), trained
                  here on a few sentences; frontend ESPnet's defaults (n_fft 512, hop 128, no
                  win_length), 20 mels; global MVN.

Writes, into OUT_DIR:
  recipe/conf/train_asr_train_{char,bpe}.yaml             the train configs given to ASRTask
  recipe/data/token_list/char/tokens.txt
  recipe/data/token_list/bpe_unigram30/{train.txt, bpe.model, bpe.vocab, tokens.txt}
  recipe/exp/asr_stats_{char,bpe}/train/feats_stats.npz   count, sum, sum_square (collect_stats)
  recipe/exp/asr_train_{char,bpe}/config.yaml             written by ASRTask.main
  recipe/exp/asr_train_{char,bpe}/valid.acc.ave.pth
  waves/{chirp,am_tone,noise_bursts,mix}.wav              mono 16 kHz 16-bit, 1.2 to 2 s
  asr_train_char.zip            the char model packed by ESPnet's pack (espnet_model_zoo's archive)
  hostile_slip.zip              an archive with meta.yaml and an entry named ../outside.txt
  espnet_reference.json         versions, decoding options, and per model and wave Speech2Text's
                                best hypothesis (text, token_ids, tokens, score) and frame counts
  espnet_reference.safetensors  "MODEL/WAVE/feats" [T, F] (frontend), ".../normalized" [T, F],
                                ".../encoder_out" [T', D], ".../ctc_log_probs" [T', V], float32

Runs offline on the CPU: nothing is downloaded.

usage: make_espnet_folder.py OUT_DIR
"""
import argparse
import json
import math
import os
import sys
import wave
from pathlib import Path

# What Speech2Text needs beyond the venv lives in <venv>/espnet-inference (tools/setup.sh), on
# this script's path only (tools/requirements/requirements-espnet-inference.txt).
sys.path.insert(0, str(Path(sys.prefix) / "espnet-inference"))

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from safetensors.torch import save_file

# espnet2.text.phoneme_tokenizer imports g2p_en, which tries to download NLTK data at import
# time when it is missing; no g2p is used here, so the download is skipped (offline, quiet).
try:
    import nltk

    nltk.download = lambda *args, **kwargs: False
except ImportError:
    pass

SAMPLE_RATE = 16000
DECODING = {"beam_size": 10, "ctc_weight": 1.0, "lm_weight": 0.0, "penalty": 0.0, "nbest": 1}
CTC_SCALE = 20.0

# The texts the tokenizers are made from (the "training transcripts").
SENTENCES = [
    "the cat sat on the mat",
    "a fat cat ate the hat",
    "then the cat sat at the tent",
    "set the hat on a tent",
    "the man at the gate sang a note",
    "ten cats ate on the mat then sat",
    "the dog ran to the red door",
    "she sees the sea near the shore",
    "we need more time to rest",
    "a bird sings in the morning rain",
]

CONFORMER = {
    "attention_heads": 4,
    "num_blocks": 2,
    "dropout_rate": 0.1,
    "positional_dropout_rate": 0.1,
    "attention_dropout_rate": 0.1,
    "input_layer": "conv2d",
    "normalize_before": True,
    "macaron_style": True,
    "rel_pos_type": "latest",
    "pos_enc_layer_type": "rel_pos",
    "selfattention_layer_type": "rel_selfattn",
    "activation_type": "swish",
    "use_cnn_module": True,
    "cnn_module_kernel": 5,
}

MODELS = {
    "asr_train_char": {
        "seed": 21,
        "token_type": "char",
        "stats": "exp/asr_stats_char",
        "train_config": {
            "frontend": "default",
            "frontend_conf": {"n_fft": 512, "win_length": 400, "hop_length": 160, "n_mels": 20},
            "encoder": "conformer",
            "encoder_conf": {"output_size": 16, "linear_units": 32, **CONFORMER},
            "model_conf": {"ctc_weight": 1.0, "lsm_weight": 0.1},
        },
    },
    "asr_train_bpe": {
        "seed": 6,
        "token_type": "bpe",
        "stats": "exp/asr_stats_bpe",
        "train_config": {
            "frontend": "default",
            "frontend_conf": {"n_mels": 20},
            "encoder": "conformer",
            "encoder_conf": {"output_size": 24, "linear_units": 48, **CONFORMER},
            "decoder": "transformer",
            "decoder_conf": {"attention_heads": 4, "linear_units": 48, "num_blocks": 1,
                             "dropout_rate": 0.1},
            "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1},
        },
    },
}


# ---------------------------------------------------------------------------------- waveforms

def synthetic_waves() -> dict[str, np.ndarray]:
    """Four varied float signals in [-1, 1]."""
    rng = np.random.default_rng(20241205)
    waves = {}

    t = np.arange(int(1.5 * SAMPLE_RATE)) / SAMPLE_RATE
    f = 150.0 * (2500.0 / 150.0) ** (t / t[-1])  # logarithmic sweep 150 Hz -> 2.5 kHz
    waves["chirp"] = 0.5 * np.sin(2 * np.pi * np.cumsum(f) / SAMPLE_RATE)

    t = np.arange(int(1.2 * SAMPLE_RATE)) / SAMPLE_RATE
    carrier = np.sin(2 * np.pi * 440 * t) + 0.5 * np.sin(2 * np.pi * 1320 * t + 0.3)
    waves["am_tone"] = 0.3 * (0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t)) * carrier

    n = int(1.8 * SAMPLE_RATE)
    x = 0.003 * rng.standard_normal(n)
    for start, length, colour in [(0.10, 0.25, 0.0), (0.55, 0.15, 0.9), (0.90, 0.40, -0.7),
                                  (1.45, 0.20, 0.5)]:
        a, m = int(start * SAMPLE_RATE), int(length * SAMPLE_RATE)
        burst = rng.standard_normal(m + 1)
        burst = burst[1:] + colour * burst[:-1]  # first-order colouring: bright or dark noise
        x[a:a + m] += 0.25 * np.hanning(m) * burst
    waves["noise_bursts"] = x

    t = np.arange(int(2.0 * SAMPLE_RATE)) / SAMPLE_RATE
    f0 = 120 + 60 * np.sin(2 * np.pi * 0.7 * t)  # vowel-like harmonic complex, gliding pitch
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    gate = (np.sin(2 * np.pi * 2.5 * t) > -0.3).astype(np.float64)
    x = 0.15 * voiced * gate + 0.02 * rng.standard_normal(t.size)
    for c in rng.integers(0, t.size - 200, 6):  # clicks
        x[c:c + 200] += 0.4 * np.exp(-np.arange(200) / 30.0) * rng.choice([-1.0, 1.0])
    waves["mix"] = x
    return {k: np.clip(v, -1.0, 1.0) for k, v in waves.items()}


def write_wav(path: Path, x: np.ndarray) -> None:
    pcm = np.round(x * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())


# ----------------------------------------------------------------------- the recipe directory

def write_char_token_list() -> Path:
    """asr.sh's char token list: tokenize_text --write_vocabulary over the transcripts,
    most frequent first, <blank> / <unk> first and <sos/eos> last."""
    from espnet2.bin.tokenize_text import tokenize

    text = Path("data/token_list/char/train.txt")
    text.parent.mkdir(parents=True, exist_ok=True)
    text.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    tokens = text.parent / "tokens.txt"
    tokenize(input=str(text), output=str(tokens), field=None, delimiter=None, token_type="char",
             space_symbol="<space>", non_linguistic_symbols=None, bpemodel=None,
             log_level="WARNING", write_vocabulary=True, vocabulary_size=12,
             remove_non_linguistic_symbols=False, cutoff=0,
             add_symbol=["<blank>:0", "<unk>:1", "<sos/eos>:-1"], cleaner=None, g2p=None,
             add_nonsplit_symbol=[])
    text.unlink()  # asr.sh tokenizes data/.../lm_train.txt, not a file beside the list
    return tokens


def write_bpe_model() -> tuple[Path, Path]:
    """asr.sh's bpe stage: spm_train (unigram, character_coverage 1.0) on the transcripts in
    data/token_list/bpe_unigram30/train.txt, then tokens.txt = <blank>, <unk>, bpe.vocab without
    its first three entries (<unk>, <s>, </s>), <sos/eos>."""
    import sentencepiece as spm

    bpedir = Path("data/token_list/bpe_unigram30")
    bpedir.mkdir(parents=True, exist_ok=True)
    (bpedir / "train.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    # One thread: the EM sums then run in a fixed order, and the model is the same each run.
    spm.SentencePieceTrainer.train(
        input=str(bpedir / "train.txt"), vocab_size=30, model_type="unigram",
        model_prefix=str(bpedir / "bpe"), character_coverage=1.0,
        input_sentence_size=100000000, num_threads=1, minloglevel=2)
    pieces = [line.split("\t")[0]
              for line in (bpedir / "bpe.vocab").read_text(encoding="utf-8").splitlines()]
    tokens = bpedir / "tokens.txt"
    tokens.write_text("\n".join(["<blank>", "<unk>", *pieces[3:], "<sos/eos>"]) + "\n",
                      encoding="utf-8")
    return bpedir / "bpe.model", tokens


def write_feats_stats(stats_dir: str, frontend_conf: dict, waves: list[np.ndarray]) -> Path:
    """feats_stats.npz as collect_stats writes it (float32 sums over all frames, int count),
    from the model's own frontend over the fixture's audio."""
    from espnet2.asr.frontend.default import DefaultFrontend

    frontend = DefaultFrontend(**frontend_conf).eval()
    total, total_sq, count = 0, 0, 0
    with torch.no_grad():
        for x in waves:
            speech = torch.from_numpy(x)[None]
            feats, lengths = frontend(speech, torch.tensor([speech.shape[1]]))
            seq = feats[0, : lengths[0]].numpy()
            total = total + seq.sum(0)
            total_sq = total_sq + (seq**2).sum(0)
            count += len(seq)
    path = Path(stats_dir) / "train" / "feats_stats.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, count=count, sum=total, sum_square=total_sq)
    return path


def perturb(model: torch.nn.Module, seed: int) -> None:
    """PyTorch's initialisation leaves norms at identity and BatchNorm's running statistics at
    0 / 1: move them so that a skipped or swapped tensor shows; scale the CTC head up so that the
    hypotheses are not all blanks."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.startswith("encoder."):
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
        model.ctc.ctc_lo.weight.mul_(CTC_SCALE)
        # A trained CTC head never emits <sos/eos> (the last token), which the prefix search
        # cannot take as a label; a random one may prefer it, so silence it as training would.
        model.ctc.ctc_lo.weight[-1].zero_()
        model.ctc.ctc_lo.bias[-1] = -20.0


def make_experiment(name: str, spec: dict, waves: list[np.ndarray]) -> Path:
    """Returns the config.yaml path; the working directory is the recipe directory."""
    from espnet2.tasks.asr import ASRTask

    cmd = ["--token_type", spec["token_type"]]
    if spec["token_type"] == "char":
        cmd += ["--token_list", str(write_char_token_list())]
    else:
        bpemodel, tokens = write_bpe_model()
        cmd += ["--token_list", str(tokens), "--bpemodel", str(bpemodel)]
    frontend_conf = {**spec["train_config"]["frontend_conf"], "fs": "16k"}
    stats = write_feats_stats(spec["stats"], frontend_conf, waves)

    train_yaml = Path("conf") / f"train_{name}.yaml"
    train_yaml.parent.mkdir(parents=True, exist_ok=True)
    train_yaml.write_text(yaml.safe_dump(spec["train_config"], sort_keys=False), encoding="utf-8")
    exp = Path("exp") / name
    # The options asr.sh's training stage adds to the train config (--dry_run: write
    # config.yaml, build the model, stop).
    ASRTask.main(cmd=[
        "--config", str(train_yaml), "--output_dir", str(exp), "--use_preprocessor", "true",
        *cmd, "--frontend_conf", "fs=16k", "--normalize", "global_mvn",
        "--normalize_conf", f"stats_file={stats}", "--ngpu", "0", "--seed", "0",
        "--log_level", "WARNING", "--dry_run", "true",
    ])
    config = exp / "config.yaml"

    torch.manual_seed(spec["seed"])
    model, _ = ASRTask.build_model_from_file(config, None, "cpu")
    perturb(model, spec["seed"] + 100)
    torch.save(model.state_dict(), exp / "valid.acc.ave.pth")
    return config


# ------------------------------------------------------------------------------- the reference

def reference(name: str, config: Path, waves: dict[str, np.ndarray],
              tensors: dict[str, torch.Tensor]) -> dict:
    from espnet2.bin.asr_inference import Speech2Text

    s2t = Speech2Text(asr_train_config=str(config),
                      asr_model_file=str(config.parent / "valid.acc.ave.pth"), device="cpu",
                      **DECODING)
    model = s2t.asr_model.eval()
    results = {}
    for wav, x in waves.items():
        (text, tokens, token_ids, hyp), = s2t(x)
        with torch.no_grad():
            speech = torch.from_numpy(x)[None]
            lengths = torch.tensor([speech.shape[1]])
            feats, feat_lengths = model.frontend(speech, lengths)
            normalized, _ = model.normalize(feats.clone(), feat_lengths)  # GlobalMVN: in place
            encoder_out, encoder_lengths = model.encode(speech, lengths)
            log_probs = model.ctc.log_softmax(encoder_out)
        ids = [int(i) for i in token_ids]
        assert hyp.yseq[1:-1].tolist() == ids, (hyp.yseq, ids)
        # CTC-only beam search: the score is log P_ctc(y | x), summed over all alignments.
        ctc = -F.ctc_loss(log_probs.transpose(0, 1), torch.tensor([ids], dtype=torch.long),
                          encoder_lengths, torch.tensor([len(ids)]), blank=0, reduction="sum",
                          zero_infinity=False).item()
        score = float(hyp.score)
        assert math.isfinite(score) and abs(score - ctc) < 1e-3, (name, wav, score, ctc)
        print(f"  {name}/{wav}: {text!r} ({len(ids)} tokens, {int(encoder_lengths[0])} frames)"
              f" score {score:.4f}, CTC log-probability {ctc:.4f}")
        results[wav] = {"text": text, "token_ids": ids, "tokens": list(tokens), "score": score,
                        "frames": int(encoder_lengths[0]), "feat_frames": int(feat_lengths[0])}
        for key, t in [("feats", feats), ("normalized", normalized),
                       ("encoder_out", encoder_out), ("ctc_log_probs", log_probs)]:
            tensors[f"{name}/{wav}/{key}"] = t[0].float().contiguous()
    return {"config": f"recipe/{config.as_posix()}",
            "model_file": f"recipe/{(config.parent / 'valid.acc.ave.pth').as_posix()}",
            "token_type": s2t.asr_train_args.token_type,
            "vocab_size": len(s2t.asr_train_args.token_list),
            "decoding": dict(DECODING), "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    out = parser.parse_args().out_dir.resolve()
    recipe = out / "recipe"
    (out / "waves").mkdir(parents=True, exist_ok=True)
    recipe.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    # The waveforms as libsndfile reads the 16-bit files back: int16 / 32768, float32.
    import soundfile

    waves = {}
    for wav, x in synthetic_waves().items():
        write_wav(out / "waves" / f"{wav}.wav", x)
        waves[wav], rate = soundfile.read(out / "waves" / f"{wav}.wav", dtype="float32")
        assert rate == SAMPLE_RATE

    import espnet

    os.chdir(recipe)  # recipes keep paths relative to the recipe directory
    tensors = {}
    summary = {"espnet": espnet.__version__, "torch": torch.__version__, "models": {}}
    for name, spec in MODELS.items():
        config = make_experiment(name, spec, list(waves.values()))
        summary["models"][name] = reference(name, config, waves, tensors)

    # The char model as espnet_model_zoo distributes it: ESPnet's own pack (meta.yaml naming the
    # config and the model, the recipe's relative paths inside the zip).
    from espnet2.main_funcs.pack_funcs import pack

    pack(files={"asr_model_file": "exp/asr_train_char/valid.acc.ave.pth"},
         yaml_files={"asr_train_config": "exp/asr_train_char/config.yaml"},
         outpath=out / "asr_train_char.zip",
         option=["exp/asr_stats_char/train/feats_stats.npz"])

    # A hostile archive: meta.yaml, and an entry whose path climbs out of the unpacked folder.
    import zipfile

    with zipfile.ZipFile(out / "hostile_slip.zip", "w") as archive:
        archive.writestr("meta.yaml", "files: {asr_model_file: m.pth}\n"
                                      "yaml_files: {asr_train_config: config.yaml}\n")
        archive.writestr(zipfile.ZipInfo("../outside.txt"), "written outside")

    save_file(tensors, str(out / "espnet_reference.safetensors"))
    (out / "espnet_reference.json").write_text(
        json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    for name, model in summary["models"].items():
        texts = [r["text"] for r in model["results"].values()]
        assert any(texts), f"{name}: every hypothesis is empty"
        assert sum(len(r["token_ids"]) >= 3 for r in model["results"].values()) >= 2, \
            f"{name}: too few multi-token hypotheses"
        print(f"{name}: {texts}")
    print(f"ESPnet {espnet.__version__} folder and reference written to {out}")


if __name__ == "__main__":
    main()
