"""Writes WeNet U2 / U2++ reference fixtures: two tiny random-weight WeNet models, saved as WeNet
training leaves an experiment folder, and the outputs of WeNet's OWN code on a few synthetic
utterances (encoder, CTC, attention decoder, CTC prefix beam search and attention rescoring).

WeNet is not on PyPI, so its source tree is imported from --wenet (put on sys.path); nothing of
it is copied here. It was run once, at the commit WENET_COMMIT below, and the small outputs are
committed, so that the C++ tests need neither Python nor WeNet.

OUT_DIR/<u2|u2pp>/ receives, for each model:
  train.yaml      WeNet's config, written as wenet/utils/train_utils.py writes it (yaml.dump)
  final.pt        torch.save(model.state_dict()), as wenet/utils/checkpoint.py saves it
  global_cmvn     CMVN statistics: Kaldi text form for u2, WeNet's JSON form for u2pp
  units.txt       "token id" per line: <blank> 0, <unk> 1, ..., <sos/eos> last
  wenet_outputs.safetensors / wenet_outputs.json
                  inputs, encoder outputs, CTC log-probs, decoder log-softmax scores (with the
                  padded decoder inputs), CTC prefix beam search n-best and attention rescoring
                  results per utterance and setting; the JSON names the WeNet commit
and OUT_DIR/README.md describes them.

The models: `u2` is a Conformer encoder (full context, BatchNorm in the convolution module) with
a `transformer` attention decoder; `u2pp` a causal Conformer encoder (causal convolution,
LayerNorm in the convolution module, dynamic chunk) with a `bitransformer` decoder (one
right-to-left block). Both are built by WeNet's init_model from the config, then made sensitive:
the CTC head is scaled so the CTC posteriors depend on the input, and the attention decoders
alone are trained 120 Adam steps with WeNet's attention loss toward chosen hypotheses of each
utterance's CTC n-best (u2pp's right-to-left decoder toward others than its left-to-right one on
two utterances), so that attention rescoring overturns CTC prefix beam search on some
utterances and depends on its weights on others, and so that each implementation mistake of
MISTAKES (a wrong <sos/eos> id, no sqrt(D) embedding scale, an unreversed right-to-left input,
ctc_weight 0), simulated with WeNet's decoder, changes at least one rescoring pick (checked: the
script fails if not). All outputs are then computed from the folder as written, reloaded with
WeNet's wenet.cli.model.load_model.

usage: make_wenet_u2_fixtures.py --wenet DIR OUT_DIR
  DIR      a WeNet source tree at WENET_COMMIT: a git checkout of wenet-e2e/wenet (its commit is
           then checked), or an export of it:
           git archive 015469960db73eb19c49a48c020d5ac9db69bae5 wenet | tar -x -C DIR
  OUT_DIR  e.g. tests/models/data/wenet_u2
WeNet's optional dependencies that are missing (librosa, langid, requests, tiktoken for
openai-whisper) are replaced by empty modules; see import_wenet. Runs on the CPU in about ten
seconds, on one thread, and is deterministic: two runs write the same bytes.
"""
import argparse
import copy
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import types
import typing
from pathlib import Path

import numpy as np
import safetensors
import torch
import yaml
from safetensors.torch import save_file

WENET_COMMIT = "015469960db73eb19c49a48c020d5ac9db69bae5"  # 2025-12-19, wenet-e2e/wenet
WENET_REPO = "wenet-e2e/wenet"

FEAT_DIM = 20
BEAM = 4
SEED = 20251219
# Utterance lengths in input frames (10 ms fbank frames, before the x4 subsampling).
UTT_FRAMES = {"utt0": 64, "utt1": 97, "utt2": 45, "utt3": 118}
# The (ctc_weight, reverse_weight) settings of attention rescoring per model.
SETTINGS = {
    "u2": [(0.0, 0.0), (0.5, 0.0)],
    "u2pp": [(0.5, 0.3), (0.0, 0.3), (0.5, 0.0)],
}
# Decoding modes (decoding_chunk_size, num_decoding_left_chunks): full context for both, and
# chunks of 4 encoder frames with all left chunks for the dynamic-chunk u2pp.
MODES = {"u2": [(-1, -1)], "u2pp": [(-1, -1), (4, -1)]}
# Which entries of each utterance's CTC n-best the attention decoder is trained toward (#0 is
# prefix beam search's best): not the best on some utterances, so that rescoring has something
# to overturn; two entries on some, so that the decoder barely prefers either and the weights,
# the <sos/eos> id and the embedding scale decide. u2pp's right-to-left decoder is trained
# toward other entries than its left-to-right one on utt0 and utt1 (RIGHT_TARGET_RANK), so that
# at reverse_weight 0.3 the right decoder decides some picks: an implementation that feeds it
# the hypothesis unreversed then picks otherwise. Chosen by trying a few, so that each mistake
# of MISTAKES changes a pick (checked: the script fails if not).
TARGET_RANK = {"u2": [(0, 3), (0, 3), (3,), (1, 2)], "u2pp": [(2, 0), (1, 0), (0,), (3,)]}
RIGHT_TARGET_RANK = {"u2pp": [(3,), (0, 2), (0,), (3,)]}
# Implementation mistakes the C++ tests must catch, per model; each, simulated here with
# WeNet's own decoder, must change at least one attention rescoring pick (checked), by at least
# MIN_PICK_MARGIN so that float32 rounding in another implementation cannot undo it. WeNet's own
# picks must beat the runner-up by as much (checked), for the same reason.
MISTAKES = {
    "u2": ["wrong_sos_eos", "missing_sqrt_d_scale", "ctc_weight_zero"],
    "u2pp": ["wrong_sos_eos", "missing_sqrt_d_scale", "unreversed_right_to_left",
             "ctc_weight_zero"],
}
MISTAKE_DESCRIPTIONS = {
    "wrong_sos_eos": "0 (the blank) instead of <sos/eos> as the start token, the padding and the "
                     "closing token scored after each hypothesis, in both directions",
    "missing_sqrt_d_scale": "the decoder input embed(tokens) not multiplied by sqrt(D) (as "
                            "embed[0].weight divided by sqrt(D)), in both directions",
    "unreversed_right_to_left": "the right-to-left decoder fed <sos> + tokens in their order "
                                "instead of reversed, and scored on that input",
    "ctc_weight_zero": "ctc_weight 0 at every setting",
}
MIN_PICK_MARGIN = 0.01
CTC_SCALE = 8.0  # ctc.ctc_lo.weight is multiplied by this
BLANK_BIAS = 1.5  # added to ctc.ctc_lo.bias[blank] so hypotheses are shorter than the input
TRAIN_STEPS = 120
# (attention dim, feed-forward units) of encoder and decoder. u2 is the smaller so that its
# final.pt can keep WeNet's positional-encoding tables (see save_checkpoint).
MODEL_DIMS = {"u2": (16, 32), "u2pp": (32, 64)}
TRAIN_LR = 5e-3

U2_UNITS = ["<blank>", "<unk>"] + list("一二三四五六七八九十") + ["<sos/eos>"]
U2PP_UNITS = (["<blank>", "<unk>"]
              + ["\u2581ONE", "\u2581TWO", "\u2581THREE", "\u2581FOUR", "\u2581FIVE",
                 "\u2581SIX", "\u2581SEVEN", "S", "\u2581AND"]
              + ["<sos/eos>"])


# ----------------------------------------------------------------------------------------------
# Importing WeNet
# ----------------------------------------------------------------------------------------------

def _install_stub(name, **attrs):
    """Puts an empty module `name` (with `attrs`) into sys.modules, dropping any half-imported
    entries of the same package first."""
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def _stub_if_missing(name, **attrs):
    try:
        importlib.import_module(name)
        return False
    except Exception:  # noqa: BLE001 - ImportError, or a dependency of it failing to import
        _install_stub(name, **attrs)
        print(f"  stubbed {name} (not importable here; unused by this script)")
        return True


def import_wenet(wenet_dir):
    """Imports wenet from `wenet_dir` with the few shims this environment needs. None of them is
    on the path this script exercises (model building, checkpoint loading, decoding)."""
    # wenet/__init__.py imports wenet.cli.model, which imports wenet.dataset.processor (audio
    # loading: librosa; language id: langid) and wenet.cli.hub (model download: requests).
    # None is used here (no audio, no download), so absent modules are replaced by empty ones.
    _stub_if_missing("librosa")
    if _stub_if_missing("langid"):
        class _NoLanguageIdentifier:
            @staticmethod
            def from_modelstring(*_args, **_kwargs):
                return None
        _install_stub("langid.langid", LanguageIdentifier=_NoLanguageIdentifier, model=None)
    _stub_if_missing("requests")
    # wenet/utils/common.py reads whisper.tokenizer.LANGUAGES (for Whisper's special tokens);
    # openai-whisper may be absent, or present without its tiktoken/numba dependencies.
    if _stub_if_missing("whisper"):
        _install_stub("whisper.tokenizer", LANGUAGES={})
    # wenet/models/squeezeformer/conv2d.py (imported by init_model's encoder table) imports the
    # typing names Union/Optional from torch.nn.modules.conv, which newer torch no longer
    # re-exports; give that module the aliases it lacks. Squeezeformer is not used here.
    import torch.nn.modules.conv as torch_conv
    for alias, value in (("Union", typing.Union), ("Optional", typing.Optional),
                         ("Tensor", torch.Tensor)):
        if not hasattr(torch_conv, alias):
            setattr(torch_conv, alias, value)
            print(f"  added torch.nn.modules.conv.{alias} (for squeezeformer's import line)")
    sys.path.insert(0, str(wenet_dir))
    wenet = types.SimpleNamespace()
    wenet.init_model = importlib.import_module("wenet.utils.init_model").init_model
    wenet.cli_model = importlib.import_module("wenet.cli.model")
    wenet.common = importlib.import_module("wenet.utils.common")
    return wenet


def wenet_commit(wenet_dir):
    """(commit, clean) of `wenet_dir` when it is a git work tree (clean: no changes under
    wenet/), else (None, None), e.g. for a `git archive` export."""
    def git(*args):
        return subprocess.run(["git", "-C", str(wenet_dir), *args], check=True,
                              capture_output=True, text=True).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return commit, git("status", "--porcelain", "--", "wenet") == ""


# ----------------------------------------------------------------------------------------------
# Configs, CMVN and units, in WeNet's forms
# ----------------------------------------------------------------------------------------------

def make_config(name, vocab_size, cmvn_path, units_path):
    """The train.yaml of a tiny model: the keys of WeNet's recipes (examples/*/s0/conf) plus
    those wenet/utils/train_utils.py:check_modify_and_save_config adds before dumping it
    (input_dim, output_dim, vocab_size, ctc_conf.ctc_blank_id, dtype, train_engine, ...).

    cmvn_conf.cmvn_file and tokenizer_conf.symbol_table_path hold paths as the recipe gave them
    (relative to the recipe folder). WeNet's init_model opens cmvn_file as written (relative to
    the working directory); wenet/cli/model.py:load_model, which loads an experiment folder,
    replaces it by <folder>/global_cmvn when that file exists, and load_tokenizer replaces each
    tokenizer_conf path by <folder>/<its basename> when that exists."""
    u2pp = name == "u2pp"
    dim, units = MODEL_DIMS[name]
    encoder_conf = {
        "output_size": dim,
        "attention_heads": 4,
        "linear_units": units,
        "num_blocks": 2,
        "dropout_rate": 0.1,
        "positional_dropout_rate": 0.1,
        "attention_dropout_rate": 0.0,
        "input_layer": "conv2d",
        "normalize_before": True,
        "cnn_module_kernel": 5,
        "use_cnn_module": True,
        "activation_type": "swish",
        "pos_enc_layer_type": "rel_pos",
        "selfattention_layer_type": "rel_selfattn",
    }
    if u2pp:
        encoder_conf.update({"causal": True, "use_dynamic_chunk": True,
                             "cnn_module_norm": "layer_norm", "use_dynamic_left_chunk": False})
    decoder_conf = {
        "attention_heads": 4,
        "linear_units": units,
        "num_blocks": 2,
        "dropout_rate": 0.1,
        "positional_dropout_rate": 0.1,
        "self_attention_dropout_rate": 0.0,
        "src_attention_dropout_rate": 0.0,
    }
    if u2pp:
        decoder_conf["r_num_blocks"] = 1
    sos_eos = vocab_size - 1
    return {
        "encoder": "conformer",
        "encoder_conf": encoder_conf,
        "decoder": "bitransformer" if u2pp else "transformer",
        "decoder_conf": decoder_conf,
        "tokenizer": "char",
        "tokenizer_conf": {
            "symbol_table_path": units_path,
            "split_with_space": False,
            "bpe_path": None,
            "non_lang_syms_path": None,
            "is_multilingual": False,
            "num_languages": 1,
            "special_tokens": {"<blank>": 0, "<unk>": 1, "<sos>": sos_eos, "<eos>": sos_eos},
        },
        "ctc": "ctc",
        "ctc_conf": {"ctc_blank_id": 0},
        "cmvn": "global_cmvn",
        "cmvn_conf": {"cmvn_file": cmvn_path, "is_json_cmvn": u2pp},
        "model": "asr_model",
        "model_conf": {
            "ctc_weight": 0.3,
            "lsm_weight": 0.1,
            "length_normalized_loss": False,
            "reverse_weight": 0.3 if u2pp else 0.0,
        },
        "dataset": "asr",
        "dataset_conf": {
            "filter_conf": {"max_length": 40960, "min_length": 0, "token_max_length": 200,
                            "token_min_length": 1},
            "resample_conf": {"resample_rate": 16000},
            "speed_perturb": False,
            "fbank_conf": {"num_mel_bins": FEAT_DIM, "frame_shift": 10, "frame_length": 25,
                           "dither": 0.1},
            "spec_aug": False,
            "shuffle": True,
            "shuffle_conf": {"shuffle_size": 1500},
            "sort": True,
            "sort_conf": {"sort_size": 500},
            "batch_conf": {"batch_type": "static", "batch_size": 4},
        },
        "grad_clip": 5,
        "accum_grad": 1,
        "max_epoch": 1,
        "log_interval": 100,
        "optim": "adam",
        "optim_conf": {"lr": TRAIN_LR},
        "scheduler": "warmuplr",
        "scheduler_conf": {"warmup_steps": 25000},
        # Added by check_modify_and_save_config:
        "input_dim": FEAT_DIM,
        "vocab_size": vocab_size,
        "output_dim": vocab_size,
        "dtype": "fp32",
        "train_engine": "torch_ddp",
        "use_amp": False,
        "model_dir": f"exp/{name}",
        "save_states": "model_only",
    }


def synthetic_frames(gen, num_frames):
    """Fbank-like log-mel frames [T, FEAT_DIM]: a spectral tilt around 10, piecewise-steady
    "phone" spectra of 6 to 18 frames, slow drift and frame noise; unnormalized."""
    bins = torch.arange(FEAT_DIM, dtype=torch.float64)
    tilt = 11.0 - 3.0 * bins / FEAT_DIM
    prototypes = torch.randn(7, FEAT_DIM, generator=gen, dtype=torch.float64) * 2.5
    frames = []
    while len(frames) < num_frames:
        length = int(torch.randint(6, 19, (1,), generator=gen))
        shape = prototypes[int(torch.randint(0, 7, (1,), generator=gen))]
        loudness = float(torch.randn(1, generator=gen, dtype=torch.float64)) * 1.5
        for _ in range(length):
            frames.append(tilt + shape + loudness)
    feats = torch.stack(frames[:num_frames])
    drift = torch.cumsum(torch.randn(num_frames, 1, generator=gen, dtype=torch.float64), 0)
    noise = torch.randn(num_frames, FEAT_DIM, generator=gen, dtype=torch.float64)
    return (feats + 0.1 * drift + 0.8 * noise).float()


def cmvn_stats(gen):
    """Global statistics over 40 synthetic utterances of 100 frames: (frame count, sums, sums of
    squares), as a training set's global_cmvn holds them."""
    frames = torch.cat([synthetic_frames(gen, 100) for _ in range(40)]).double()
    return frames.shape[0], frames.sum(0).tolist(), (frames * frames).sum(0).tolist()


def write_kaldi_cmvn(path, count, sums, squares):
    """Kaldi's `compute-cmvn-stats --binary=false` text matrix: [ sums count ; squares 0 ]."""
    first = " ".join(f"{v:.8g}" for v in sums) + f" {count}"
    second = " ".join(f"{v:.8g}" for v in squares) + " 0"
    path.write_text(f" [\n  {first}\n  {second} ]\n")


def write_json_cmvn(path, count, sums, squares):
    """WeNet's tools/compute_cmvn_stats.py JSON: mean_stat (sums), var_stat (sums of squares),
    frame_num."""
    stats = {"mean_stat": [round(v, 6) for v in sums],
             "var_stat": [round(v, 6) for v in squares], "frame_num": count}
    path.write_text(json.dumps(stats) + "\n")


# ----------------------------------------------------------------------------------------------
# Building, perturbing and training
# ----------------------------------------------------------------------------------------------

def perturb_norms(model, gen):
    """Moves every LayerNorm/BatchNorm affine pair off (1, 0) and gives BatchNorm non-trivial
    running statistics, so an implementation that ignores them cannot pass."""
    for module in model.modules():
        if isinstance(module, (torch.nn.LayerNorm, torch.nn.BatchNorm1d)):
            n = module.weight.numel()
            with torch.no_grad():
                module.weight.copy_(1.0 + 0.15 * torch.randn(n, generator=gen))
                module.bias.copy_(0.1 * torch.randn(n, generator=gen))
        if isinstance(module, torch.nn.BatchNorm1d):
            n = module.running_mean.numel()
            module.running_mean.copy_(0.3 * torch.randn(n, generator=gen))
            module.running_var.copy_(0.5 + torch.rand(n, generator=gen))


def sharpen_ctc(model, utts):
    """Scales the CTC head so its posteriors are peaked and depend on the frame, and centres its
    logits over the utterances' encoder frames (the random head otherwise favours the one or two
    tokens its weights align with the encoder's mean output), then favours blank a little so
    hypotheses are shorter than the input. <sos/eos> is made unreachable for CTC, as in a
    trained model (WeNet's search does not exclude it)."""
    frames = torch.cat([encode(model, f)[0][0] for f in utts.values()])
    with torch.no_grad():
        model.ctc.ctc_lo.weight.mul_(CTC_SCALE)
        model.ctc.ctc_lo.bias.sub_(model.ctc.ctc_lo(frames).mean(0))
        model.ctc.ctc_lo.bias[0] += BLANK_BIAS
        model.ctc.ctc_lo.bias[model.eos] -= 30.0


def encode(model, feats, chunk=-1, left=-1):
    """WeNet's encoder as ASRModel.decode runs it: batch of one, no padding."""
    speech = feats.unsqueeze(0)
    lengths = torch.tensor([feats.shape[0]])
    with torch.no_grad():
        return model._forward_encoder(speech, lengths, chunk, left)


def _batch(model, examples):
    """(memory, memory_mask, ys_pad, ys_lens) of (features, target tokens) pairs: the frozen
    encoder's full-context outputs, padded, and the targets padded with ignore_id."""
    encoded = [encode(model, f)[0][0] for f, _ in examples]
    lengths = torch.tensor([e.shape[0] for e in encoded])
    memory = torch.nn.utils.rnn.pad_sequence(encoded, batch_first=True)
    memory_mask = (torch.arange(memory.shape[1])[None, :] < lengths[:, None]).unsqueeze(1)
    ys = torch.nn.utils.rnn.pad_sequence([torch.tensor(t) for _, t in examples],
                                         batch_first=True, padding_value=model.ignore_id)
    ys_lens = torch.tensor([len(t) for _, t in examples])
    return memory, memory_mask, ys, ys_lens


def train_decoder(model, steps, examples, right_examples=None):
    """`steps` Adam steps on the attention decoder alone, with WeNet's attention loss
    (ASRModel._calc_att_loss: LabelSmoothingLoss on the left-to-right decoder, and for a
    bitransformer its right-to-left decoder on the reversed targets, mixed by the model's
    reverse_weight rw), on (features, target tokens) pairs. The encoder stays in eval mode and
    frozen.

    With `right_examples`, the right-to-left decoder learns other targets than the left one:
    the loss is then (1 - rw) * _calc_att_loss(examples) at reverse_weight 0 (the left decoder
    alone) + rw * _calc_att_loss(right_examples) at reverse_weight 1 (the right decoder alone
    on the reversed targets), the value of _calc_att_loss itself when both lists are the same."""
    batch = _batch(model, examples)
    right_batch = _batch(model, right_examples) if right_examples is not None else None
    reverse_weight = model.reverse_weight
    optimizer = torch.optim.Adam(model.decoder.parameters(), lr=TRAIN_LR)
    model.eval()
    model.decoder.train()
    try:
        for step in range(steps):
            optimizer.zero_grad()
            if right_batch is None:
                loss, acc = model._calc_att_loss(*batch)
            else:
                model.reverse_weight = 0.0
                left_loss, acc = model._calc_att_loss(*batch)
                model.reverse_weight = 1.0
                right_loss, _ = model._calc_att_loss(*right_batch)
                model.reverse_weight = reverse_weight
                loss = (1 - reverse_weight) * left_loss + reverse_weight * right_loss
            loss.backward()
            optimizer.step()
            if step % 50 == 0 or step == steps - 1:
                print(f"    step {step:3d}: attention loss {loss.item():.4f}, "
                      f"left-to-right accuracy {acc:.3f}")
    finally:
        model.reverse_weight = reverse_weight
    model.eval()


# ----------------------------------------------------------------------------------------------
# Decoding with WeNet and recording
# ----------------------------------------------------------------------------------------------

def rescoring_components(model, hyps, decoder_out, r_decoder_out, ctc_scores, ctc_weight,
                         reverse_weight):
    """Per hypothesis: the left-to-right and right-to-left decoder sums (tokens and <eos>) and
    the combined score, from the decoder's log-softmax output, as attention rescoring combines
    them; used to check our reading of WeNet's formula against its own result."""
    eos = model.eos
    rows = []
    for i, hyp in enumerate(hyps):
        l2r = sum(float(decoder_out[i][j][w]) for j, w in enumerate(hyp))
        l2r += float(decoder_out[i][len(hyp)][eos])
        r2l = None
        score = l2r
        if reverse_weight > 0:
            r2l = sum(float(r_decoder_out[i][len(hyp) - j - 1][w]) for j, w in enumerate(hyp))
            r2l += float(r_decoder_out[i][len(hyp)][eos])
            score = l2r * (1 - reverse_weight) + r2l * reverse_weight
        rows.append({"l2r": l2r, "r2l": r2l, "total": score + ctc_scores[i] * ctc_weight})
    return rows


def decode_utterance(model, feats, chunk, left, settings):
    """WeNet's ASRModel.decode(['ctc_prefix_beam_search', 'attention_rescoring'], ...) at each
    (ctc_weight, reverse_weight), batch of one. Returns the prefix beam search record (the same
    at every setting, checked) and one attention rescoring record per setting."""
    speech = feats.unsqueeze(0)
    lengths = torch.tensor([feats.shape[0]])
    prefix = None
    rescored = []
    for ctc_weight, reverse_weight in settings:
        with torch.no_grad():
            results = model.decode(["ctc_prefix_beam_search", "attention_rescoring"], speech,
                                   lengths, beam_size=BEAM, decoding_chunk_size=chunk,
                                   num_decoding_left_chunks=left, ctc_weight=ctc_weight,
                                   simulate_streaming=False, reverse_weight=reverse_weight)
        pbs = results["ctc_prefix_beam_search"][0]
        record = {"tokens": list(pbs.tokens), "score": pbs.score,
                  "nbest": [list(h) for h in pbs.nbest], "nbest_scores": list(pbs.nbest_scores)}
        if prefix is None:
            prefix = record
        elif prefix != record:
            raise SystemExit("ctc_prefix_beam_search is not deterministic")
        best = results["attention_rescoring"][0]
        hyps = prefix["nbest"]
        index = hyps.index(list(best.tokens))
        rescored.append({"ctc_weight": ctc_weight, "reverse_weight": reverse_weight,
                         "tokens": list(best.tokens), "score": best.score,
                         "confidence": best.confidence, "nbest_index": index,
                         "differs_from_prefix_best": index != 0})
    return prefix, rescored


def decoder_inputs(model, wenet, hyps):
    """The padded decoder inputs attention rescoring builds for an n-best: hyps_pad = <sos> +
    tokens, padded with <eos>; hyps_lens = len + 1; r_hyps_pad = <sos> + reversed tokens, padded
    with <eos> (WeNet's reverse_pad_list + add_sos_eos, which ASRModel.forward_attention_decoder
    reproduces with a gather)."""
    pad = torch.nn.utils.rnn.pad_sequence([torch.tensor(h, dtype=torch.long) for h in hyps],
                                          batch_first=True, padding_value=model.ignore_id)
    lens = torch.tensor([len(h) for h in hyps], dtype=torch.long)
    hyps_pad, _ = wenet.common.add_sos_eos(pad, model.sos, model.eos, model.ignore_id)
    r_pad = wenet.common.reverse_pad_list(pad, lens, float(model.ignore_id))
    r_hyps_pad, _ = wenet.common.add_sos_eos(r_pad, model.sos, model.eos, model.ignore_id)
    return hyps_pad, lens + 1, r_hyps_pad.long()


def run_reference(model, wenet, name, utts):
    """Every recorded output, from `model` (the folder reloaded by WeNet)."""
    tensors = {}
    decodes = []
    per_utt_enc = {}
    for chunk, left in MODES[name]:
        suffix = "" if chunk < 0 else f".chunk{chunk}"
        mode = {"decoding_chunk_size": chunk, "num_decoding_left_chunks": left,
                "simulate_streaming": False, "utterances": {}}
        for utt, feats in utts.items():
            encoder_out, encoder_mask = encode(model, feats, chunk, left)
            with torch.no_grad():
                ctc = model.ctc_logprobs(encoder_out)
            tensors[f"encoder_out.{utt}{suffix}"] = encoder_out.contiguous()
            tensors[f"ctc_log_probs.{utt}{suffix}"] = ctc.contiguous()
            if chunk < 0:
                per_utt_enc[utt] = encoder_out
            prefix, rescored = decode_utterance(model, feats, chunk, left, SETTINGS[name])
            # Our reading of WeNet's combination, checked against its result.
            hyps_pad, hyps_lens, _ = decoder_inputs(model, wenet, prefix["nbest"])
            for r in rescored:
                with torch.no_grad():
                    dec, r_dec = model.forward_attention_decoder(hyps_pad, hyps_lens,
                                                                 encoder_out, r["reverse_weight"])
                rows = rescoring_components(model, prefix["nbest"], dec, r_dec,
                                            prefix["nbest_scores"], r["ctc_weight"],
                                            r["reverse_weight"])
                r["nbest_rescored"] = rows
                ours = max(range(len(rows)), key=lambda i: rows[i]["total"])
                if ours != r["nbest_index"] or abs(rows[ours]["total"] - r["score"]) > 1e-4:
                    raise SystemExit(f"{name} {utt}: our reading of attention_rescoring gives "
                                     f"{ours} {rows[ours]['total']}, WeNet {r['nbest_index']} "
                                     f"{r['score']}")
            mode["utterances"][utt] = {"num_frames": feats.shape[0],
                                       "encoder_frames": encoder_out.shape[1],
                                       "ctc_prefix_beam_search": prefix,
                                       "attention_rescoring": rescored}
            changed = [f"cw={r['ctc_weight']} rw={r['reverse_weight']}->#{r['nbest_index']}"
                       for r in rescored if r["differs_from_prefix_best"]]
            print(f"  {name} chunk {chunk:2d} {utt}: T={feats.shape[0]} T'={encoder_out.shape[1]}"
                  f" prefix best {prefix['tokens']} ({prefix['score']:.3f}); rescoring changes"
                  f" it at: {', '.join(changed) if changed else 'none'}")
        decodes.append(mode)

    # Decoder parity on one utterance: the full-context n-best of the first utterance where
    # rescoring changes the choice.
    full = decodes[0]["utterances"]
    utt = next(u for u in utts if any(r["differs_from_prefix_best"]
                                      for r in full[u]["attention_rescoring"]))
    hyps = full[utt]["ctc_prefix_beam_search"]["nbest"]
    hyps_pad, hyps_lens, r_hyps_pad = decoder_inputs(model, wenet, hyps)
    encoder_out = per_utt_enc[utt]
    reverse_weight = 0.3 if name == "u2pp" else 0.0
    memory = encoder_out.repeat(len(hyps), 1, 1)
    memory_mask = torch.ones(len(hyps), 1, memory.shape[1], dtype=torch.bool)
    with torch.no_grad():
        out, r_out, _ = model.decoder(memory, memory_mask, hyps_pad, hyps_lens, r_hyps_pad,
                                      reverse_weight)
        l2r = torch.log_softmax(out, dim=-1)
        ref_l2r, ref_r2l = model.forward_attention_decoder(hyps_pad, hyps_lens, encoder_out,
                                                           reverse_weight)
    if not torch.equal(l2r, ref_l2r):
        raise SystemExit("decoder forward differs from forward_attention_decoder (l2r)")
    tensors["decoder.encoder_out"] = encoder_out.clone()
    tensors["decoder.encoder_mask"] = memory_mask
    tensors["decoder.hyps_pad"] = hyps_pad.contiguous()
    tensors["decoder.hyps_lens"] = hyps_lens.contiguous()
    tensors["decoder.r_hyps_pad"] = r_hyps_pad.contiguous()
    tensors["decoder.l2r_log_probs"] = l2r.contiguous()
    if reverse_weight > 0:
        r2l = torch.log_softmax(r_out, dim=-1)
        if not torch.equal(r2l, ref_r2l):
            raise SystemExit("decoder forward differs from forward_attention_decoder (r2l)")
        tensors["decoder.r2l_log_probs"] = r2l.contiguous()
    parity = {"utterance": utt, "reverse_weight": reverse_weight, "nbest": hyps,
              "call": "model.decoder(encoder_out.repeat(N, 1, 1), encoder_mask, hyps_pad, "
                      "hyps_lens, r_hyps_pad, reverse_weight) -> log_softmax(-1)"}
    return tensors, decodes, parity


# ----------------------------------------------------------------------------------------------
# Implementation mistakes, simulated with WeNet's decoder
# ----------------------------------------------------------------------------------------------

def decoder_sums(decoder, encoder_out, hyps, start, reverse_right, reverse_weight):
    """Attention rescoring's decoder terms of each hypothesis, with WeNet's decoder module (its
    forward, as ASRModel.forward_attention_decoder calls it) on inputs built here: `start` as the
    start, padding and closing token (<sos/eos> when right, 0 for the wrong-id mistake), and the
    right-to-left input reversed or not. Returns (l2r, r2l): per hypothesis the sum of the
    log-softmax at each fed token and at `start` after the last (r2l None at reverse_weight 0).
    With start = <sos/eos> and reverse_right these are rescoring_components' l2r and r2l."""
    n = len(hyps)
    longest = max(len(h) for h in hyps)
    left = [list(h) for h in hyps]
    right = [list(reversed(h)) if reverse_right else list(h) for h in hyps]

    def padded(seqs):
        tokens = torch.full((n, longest + 1), start, dtype=torch.long)
        for i, seq in enumerate(seqs):
            tokens[i, 1:len(seq) + 1] = torch.tensor(seq, dtype=torch.long)
        return tokens

    def sums(log_probs, seqs):
        return [sum(float(log_probs[i][j][w]) for j, w in enumerate(seq))
                + float(log_probs[i][len(seq)][start]) for i, seq in enumerate(seqs)]

    lens = torch.tensor([len(h) + 1 for h in hyps], dtype=torch.long)
    memory = encoder_out.repeat(n, 1, 1)
    memory_mask = torch.ones(n, 1, memory.shape[1], dtype=torch.bool)
    with torch.no_grad():
        out, r_out, _ = decoder(memory, memory_mask, padded(left), lens, padded(right),
                                reverse_weight)
    l2r = sums(torch.log_softmax(out, dim=-1), left)
    r2l = sums(torch.log_softmax(r_out, dim=-1), right) if reverse_weight > 0 else None
    return l2r, r2l


def rescoring_pick(l2r, r2l, ctc_scores, ctc_weight, reverse_weight):
    """WeNet's attention_rescoring choice from the decoder terms: total = (1 - rw) * l2r + rw *
    r2l (l2r alone at rw 0) + ctc_weight * CTC score; the first maximum wins. Returns (index,
    totals)."""
    totals = []
    best, best_index = -float("inf"), 0
    for i, left in enumerate(l2r):
        score = left * (1 - reverse_weight) + r2l[i] * reverse_weight if reverse_weight > 0 \
            else left
        score += ctc_scores[i] * ctc_weight
        totals.append(score)
        if score > best:
            best, best_index = score, i
    return best_index, totals


def unscaled_decoder(decoder):
    """A copy of `decoder` whose token embeddings (both directions of a bitransformer) are
    divided by sqrt(D): the same as leaving out the sqrt(D) scale of WeNet's PositionalEncoding
    (x * xscale + pe), which is checked to be that scale."""
    copied = copy.deepcopy(decoder)
    parts = ([copied.left_decoder, copied.right_decoder] if hasattr(copied, "right_decoder")
             else [copied])
    with torch.no_grad():
        for part in parts:
            embedding, positional = part.embed[0], part.embed[1]
            root = math.sqrt(embedding.weight.shape[1])
            if positional.xscale != root:
                raise SystemExit(f"the decoder's embedding scale is {positional.xscale}, not "
                                 f"sqrt(D) = {root}")
            embedding.weight.div_(root)
    return copied


def mistake_picks(model, name, utts, decodes):
    """Per mistake of MISTAKES[name]: the rescoring picks it produces over every decoding mode
    (in `decodes` order), utterance (in key order, as a JSON reader iterates them) and setting
    (in attention_rescoring order), how many differ from WeNet's, and by how much the clearest
    change wins. The same computation without a mistake must reproduce WeNet's picks and
    decoder terms, each pick beating the runner-up by at least MIN_PICK_MARGIN; each mistake
    must change a pick by at least as much."""
    unscaled = unscaled_decoder(model.decoder)
    sos = model.sos
    picks = {m: [] for m in MISTAKES[name]}
    margins = {m: [] for m in MISTAKES[name]}
    expected = []
    for mode in decodes:
        chunk, left = mode["decoding_chunk_size"], mode["num_decoding_left_chunks"]
        for utt in sorted(mode["utterances"]):
            rec = mode["utterances"][utt]
            encoder_out, _ = encode(model, utts[utt], chunk, left)
            hyps = rec["ctc_prefix_beam_search"]["nbest"]
            ctc = rec["ctc_prefix_beam_search"]["nbest_scores"]
            for r in rec["attention_rescoring"]:
                cw, rw = r["ctc_weight"], r["reverse_weight"]
                l2r, r2l = decoder_sums(model.decoder, encoder_out, hyps, sos, True, rw)
                index, totals = rescoring_pick(l2r, r2l, ctc, cw, rw)
                runner_up = max((t for i, t in enumerate(totals) if i != index),
                                default=-float("inf"))
                if totals[index] - runner_up < MIN_PICK_MARGIN:
                    raise SystemExit(f"{name} chunk {chunk} {utt} cw {cw} rw {rw}: WeNet's pick "
                                     f"wins by {totals[index] - runner_up:.2e} only")
                terms = r["nbest_rescored"]
                if index != r["nbest_index"] or any(
                        abs(l2r[i] - t["l2r"]) > 1e-4
                        or (rw > 0 and abs(r2l[i] - t["r2l"]) > 1e-4)
                        for i, t in enumerate(terms)):
                    raise SystemExit(f"{name} chunk {chunk} {utt} cw {cw} rw {rw}: the mistake "
                                     "simulation without a mistake does not reproduce WeNet")
                expected.append(index)
                for mistake in MISTAKES[name]:
                    if mistake == "wrong_sos_eos":
                        terms_m, cw_m = decoder_sums(model.decoder, encoder_out, hyps, 0, True,
                                                     rw), cw
                    elif mistake == "missing_sqrt_d_scale":
                        terms_m, cw_m = decoder_sums(unscaled, encoder_out, hyps, sos, True,
                                                     rw), cw
                    elif mistake == "unreversed_right_to_left":
                        terms_m, cw_m = decoder_sums(model.decoder, encoder_out, hyps, sos,
                                                     False, rw), cw
                    else:  # ctc_weight_zero
                        terms_m, cw_m = (l2r, r2l), 0.0
                    wrong, totals = rescoring_pick(*terms_m, ctc, cw_m, rw)
                    picks[mistake].append(wrong)
                    margins[mistake].append(totals[wrong] - totals[index])
    record = {}
    for mistake in MISTAKES[name]:
        changed = [i for i, p in enumerate(picks[mistake]) if p != expected[i]]
        margin = max((margins[mistake][i] for i in changed), default=0.0)
        print(f"  {name} mistake {mistake}: {len(changed)} of {len(expected)} picks change "
              f"(the clearest by {margin:.4f})")
        if not changed:
            raise SystemExit(f"{name}: the mistake {mistake} changes no rescoring pick; the "
                             "fixtures would not catch it")
        if margin < MIN_PICK_MARGIN:
            raise SystemExit(f"{name}: the mistake {mistake} changes picks by {margin:.2e} at "
                             f"most, under {MIN_PICK_MARGIN}")
        record[mistake] = {"description": MISTAKE_DESCRIPTIONS[mistake],
                           "picks": picks[mistake], "num_differing": len(changed),
                           "largest_margin": round(margin, 6)}
    return record


# ----------------------------------------------------------------------------------------------
# One model
# ----------------------------------------------------------------------------------------------

def build_model(wenet, name, out, utts):
    units = U2PP_UNITS if name == "u2pp" else U2_UNITS
    vocab = len(units)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(SEED + (1 if name == "u2pp" else 0))

    (folder / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)),
                                      encoding="utf-8")
    count, sums, squares = cmvn_stats(gen)
    if name == "u2pp":
        write_json_cmvn(folder / "global_cmvn", count, sums, squares)
        config = make_config(name, vocab, "global_cmvn", "units.txt")
    else:
        write_kaldi_cmvn(folder / "global_cmvn", count, sums, squares)
        config = make_config(name, vocab, "data/train/global_cmvn", "data/dict/units.txt")
    (folder / "train.yaml").write_text(yaml.dump(config))

    # Build with WeNet's init_model from the config; the CMVN file is the one just written.
    build_config = copy.deepcopy(config)
    build_config["cmvn_conf"]["cmvn_file"] = str(folder / "global_cmvn")
    torch.manual_seed(SEED + 10 + (1 if name == "u2pp" else 0))
    model, _ = wenet.init_model(argparse.Namespace(), build_config)
    model.eval()
    perturb_norms(model, gen)
    sharpen_ctc(model, utts)

    # Targets: chosen entries of each utterance's CTC n-best (non-empty); for u2pp's
    # right-to-left decoder, other entries on some utterances (RIGHT_TARGET_RANK).
    targets, right_targets = {}, {}
    for k, (utt, feats) in enumerate(utts.items()):
        prefix, _ = decode_utterance(model, feats, -1, -1, [(0.0, 0.0)])
        hyps = [h for h in prefix["nbest"] if h]
        targets[utt] = [hyps[min(rank, len(hyps) - 1)] for rank in TARGET_RANK[name][k]]
        if name in RIGHT_TARGET_RANK:
            right_targets[utt] = [hyps[min(rank, len(hyps) - 1)]
                                  for rank in RIGHT_TARGET_RANK[name][k]]
        print(f"  {name} {utt}: n-best {prefix['nbest']}, training toward {targets[utt]}"
              + (f", right-to-left toward {right_targets[utt]}" if right_targets else ""))
    train_decoder(model, TRAIN_STEPS, [(utts[u], t) for u in utts for t in targets[u]],
                  [(utts[u], t) for u in utts for t in right_targets[u]]
                  if right_targets else None)

    save_checkpoint(model, name, folder / "final.pt")
    print(f"  wrote {folder}/final.pt, train.yaml, global_cmvn, units.txt")
    return config, targets, right_targets


def save_checkpoint(model, name, path):
    """final.pt as wenet/utils/checkpoint.py:save_checkpoint writes it: torch.save of the
    model's state_dict (an OrderedDict of tensors, no optimizer or infos; those go to a
    separate final.yaml, not needed here).

    It holds every positional-encoding table as a buffer `*.pe` [1, 5000, D] (float32,
    sin/cos, a function of D alone). u2's final.pt keeps them, exactly as WeNet writes it; u2pp
    has three (encoder, left and right decoder: 1.9 MB at D = 32), so they are left out of its
    final.pt to keep the fixtures small. WeNet loads both the same: load_checkpoint calls
    load_state_dict(strict=False), which only logs missing keys, and the constructor has
    already built the same tables (checked: the outputs are computed from the reloaded
    folder)."""
    state = model.state_dict()
    if name == "u2pp":
        state = type(state)((k, v) for k, v in state.items() if not k.endswith(".pe"))
    torch.save(state, path)


def reload_model(wenet, folder):
    """The experiment folder loaded by WeNet's own loader (wenet/cli/model.py:load_model): it
    reads train.yaml, points cmvn_file to <folder>/global_cmvn and loads final.pt through
    init_model(args.checkpoint=...)."""
    folder = folder.resolve()
    cwd = os.getcwd()
    try:  # from elsewhere, so that no recipe-relative path in train.yaml resolves by chance
        os.chdir(folder.parent)
        model = wenet.cli_model.load_model(str(folder))
    finally:
        os.chdir(cwd)
    model.eval()
    return model


def write_outputs(folder, name, config, targets, right_targets, utts, tensors, decodes,
                  parity, mistakes, commit_info):
    for utt, feats in utts.items():
        tensors[f"feats.{utt}"] = feats.contiguous()
    tensors = {k: tensors[k] for k in sorted(tensors)}
    # One metadata entry: safetensors writes the metadata map in hash order, so several entries
    # would make the file differ from run to run.
    save_file(tensors, folder / "wenet_outputs.safetensors",
              metadata={"wenet_commit": WENET_COMMIT})
    units = (folder / "units.txt").read_text(encoding="utf-8").split("\n")
    record = {
        "model": name,
        "wenet_repo": WENET_REPO,
        "wenet_commit": WENET_COMMIT,
        "wenet_commit_verified": commit_info,
        "generator": "tools/scripts/make_wenet_u2_fixtures.py",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "numpy": np.__version__, "pyyaml": yaml.__version__,
                     "safetensors": safetensors.__version__},
        "wenet_api": {
            "build": "wenet.utils.init_model.init_model(args, configs)",
            "load": "wenet.cli.model.load_model(model_dir)",
            "decode": "ASRModel.decode(methods=['ctc_prefix_beam_search', "
                      "'attention_rescoring'], speech, speech_lengths, beam_size, "
                      "decoding_chunk_size, num_decoding_left_chunks, ctc_weight, "
                      "simulate_streaming=False, reverse_weight)",
            "encoder": "ASRModel._forward_encoder(speech, speech_lengths, decoding_chunk_size, "
                       "num_decoding_left_chunks)",
            "ctc": "ASRModel.ctc_logprobs(encoder_out)",
            "rescoring_decoder": "ASRModel.forward_attention_decoder(hyps_pad, hyps_lens, "
                                 "encoder_out, reverse_weight)",
        },
        "units": [u for u in units if u],
        "vocab_size": config["output_dim"],
        "blank_id": 0,
        "sos_id": config["output_dim"] - 1,
        "eos_id": config["output_dim"] - 1,
        "ignore_id": -1,
        "beam_size": BEAM,
        "feat_dim": FEAT_DIM,
        "subsampling": 4,
        "construction": {
            "seed": SEED,
            "ctc_lo_weight_scale": CTC_SCALE,
            "ctc_lo_blank_bias_added": BLANK_BIAS,
            "norms_perturbed": True,
            "decoder_train_steps": TRAIN_STEPS,
            "decoder_train_lr": TRAIN_LR,
            "decoder_train_targets": targets,
            **({"decoder_train_right_to_left_targets": right_targets} if right_targets else {}),
        },
        "settings": [{"ctc_weight": c, "reverse_weight": r} for c, r in SETTINGS[name]],
        "fields": {
            "decoding[]": "one decoding mode (encoder chunking) each",
            "ctc_prefix_beam_search": "WeNet's DecodeResult: tokens, score (best), nbest, "
                                      "nbest_scores (CTC log-likelihoods, double arithmetic)",
            "attention_rescoring[]": "one per setting: WeNet's DecodeResult tokens, score, "
                                     "confidence; nbest_index of the pick in the n-best",
            "nbest_rescored": "per n-best entry, computed here in double from "
                              "forward_attention_decoder's log-softmax output: l2r = sum of "
                              "token and <eos> log-probs, r2l (u2pp, reverse_weight > 0) the "
                              "same on the right-to-left output, total = (1 - rw) * l2r + rw * "
                              "r2l + ctc_weight * nbest_scores[i]; WeNet's score is the float32 "
                              "total of its pick (checked to 1e-4)",
            "mistakes": "per implementation mistake, simulated with WeNet's decoder module: "
                        "the picks it gives for every decoding mode (in `decoding` order), "
                        "utterance (key order) and setting (attention_rescoring order), how "
                        "many differ from WeNet's (nbest_index), and by how much the total of "
                        "the clearest wrong pick exceeds that of WeNet's pick",
        },
        "decoding": decodes,
        "decoder_parity": parity,
        "mistakes": mistakes,
        "tensors": {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
                    for k, v in tensors.items()},
    }
    (folder / "wenet_outputs.json").write_text(json.dumps(record, indent=1, ensure_ascii=False)
                                               + "\n", encoding="utf-8")


def summarize(name, decodes):
    lines = []
    for mode in decodes:
        for utt, rec in mode["utterances"].items():
            for r in rec["attention_rescoring"]:
                if r["differs_from_prefix_best"]:
                    lines.append((mode["decoding_chunk_size"], utt, r["ctc_weight"],
                                  r["reverse_weight"], r["nbest_index"]))
    if not lines:
        raise SystemExit(f"{name}: attention rescoring never overturns CTC prefix beam search; "
                         "the fixtures would not test the decoder")
    depends = [(mode["decoding_chunk_size"], utt) for mode in decodes
               for utt, rec in mode["utterances"].items()
               if len({r["nbest_index"] for r in rec["attention_rescoring"]}) > 1]
    if not depends:
        raise SystemExit(f"{name}: the rescoring choice never depends on the weights")
    full = [x for x in lines if x[0] < 0]
    for cw, rw in SETTINGS[name]:
        if not any(x[2] == cw and x[3] == rw for x in full):
            raise SystemExit(f"{name}: at ctc_weight {cw}, reverse_weight {rw} rescoring agrees "
                             "with prefix beam search on every utterance")
    return lines


def write_readme(out, results):
    """OUT_DIR/README.md: what the files are, how they were made, where rescoring changes the
    choice and which picks each mistake changes (from `results`: name -> (config, decodes,
    mistakes))."""
    lines = [
        "# WeNet U2 / U2++ reference fixtures",
        "",
        "Written by `tools/scripts/make_wenet_u2_fixtures.py --wenet WENET_DIR "
        "tests/models/data/wenet_u2`, which imports and runs WeNet's own code "
        f"({WENET_REPO}, commit {WENET_COMMIT}, 2025-12-19; WENET_DIR a git checkout of it, or "
        f"`git archive {WENET_COMMIT[:12]} wenet | tar -x -C WENET_DIR`) with torch "
        f"{torch.__version__.split('+')[0]} on the CPU. Do not edit by hand: rerun the script "
        "(two runs write the same bytes).",
        "",
        "Two tiny random-weight models, built by WeNet's `init_model` from the train.yaml next "
        "to them, saved as a WeNet experiment folder, then reloaded with WeNet's "
        "`wenet.cli.model.load_model(folder)`; every output below comes from the reloaded "
        "model (eval mode, float32, one utterance per batch):",
        "",
    ]
    for name, (config, _, _) in results.items():
        enc, dec = config["encoder_conf"], config["decoder_conf"]
        kind = ("causal Conformer (causal conv, LayerNorm conv norm, dynamic chunk)"
                if name == "u2pp" else "Conformer (full context, BatchNorm conv norm)")
        blocks = (f"{dec['num_blocks']} left-to-right + {dec['r_num_blocks']} right-to-left"
                  if name == "u2pp" else str(dec["num_blocks"]))
        lines.append(f"- `{name}/`: {kind}, {enc['num_blocks']} blocks of {enc['output_size']} "
                     f"(4 heads, feed-forward {enc['linear_units']}, kernel "
                     f"{enc['cnn_module_kernel']}, conv2d x4 subsampling, rel_pos), "
                     f"`{config['decoder']}` decoder with {blocks} blocks; "
                     f"{config['output_dim']} units, <sos/eos> = {config['output_dim'] - 1}; "
                     f"CMVN `global_cmvn` in "
                     f"{'JSON' if config['cmvn_conf']['is_json_cmvn'] else 'Kaldi text'} form.")
    lines += [
        "",
        "Each folder holds:",
        "",
        "- `train.yaml`: the config as WeNet training dumps it (yaml.dump of the recipe keys "
        "plus input_dim, output_dim, vocab_size, ...). `cmvn_conf.cmvn_file` and "
        "`tokenizer_conf.symbol_table_path` are recipe-relative paths; WeNet's load_model "
        "replaces them by `<folder>/global_cmvn` and `<folder>/<basename>` (units.txt).",
        "- `final.pt`: `torch.save(model.state_dict())`, WeNet's checkpoint form. u2's keeps "
        "the positional-encoding buffers `*.pe` [1, 5000, D] exactly as WeNet writes them; "
        "u2pp's leaves its three out (size), which WeNet's `load_checkpoint` "
        "(load_state_dict strict=False) accepts, rebuilding them.",
        "- `global_cmvn`: frame count, sums and sums of squares of 4000 synthetic frames "
        "(u2: Kaldi `compute-cmvn-stats --binary=false` text; u2pp: WeNet's JSON "
        "`mean_stat`/`var_stat`/`frame_num`).",
        "- `units.txt`: `token id` per line, `<blank>` 0, `<unk>` 1, `<sos/eos>` last.",
        "- `wenet_outputs.safetensors`: `feats.uttN` [T, 20] (input fbank-like features, "
        "before CMVN), `encoder_out.uttN` [1, T', D] and `ctc_log_probs.uttN` [1, T', V] "
        "(full context; u2pp also `.chunk4`: decoding_chunk_size 4, all left chunks), and the "
        "attention decoder on one utterance's n-best: `decoder.encoder_out`, "
        "`decoder.encoder_mask` [N, 1, T'], `decoder.hyps_pad` [N, L+1] (<sos> + tokens, "
        "padded with <eos>), `decoder.hyps_lens` [N] (len + 1), `decoder.r_hyps_pad` "
        "(<sos> + reversed tokens, padded with <eos>), `decoder.l2r_log_probs` [N, L+1, V] "
        "and for u2pp `decoder.r2l_log_probs` (log_softmax of `model.decoder(...)`).",
        "- `wenet_outputs.json`: the WeNet commit and versions, the WeNet calls, token ids, "
        "how the model was made sensitive, the tensor list, and per decoding mode and "
        "utterance: CTC prefix beam search (beam 4: best tokens and score, the n-best and "
        "their CTC scores) and attention rescoring per (ctc_weight, reverse_weight): tokens, "
        "score, confidence, the chosen n-best index, and each n-best entry's decoder sums; "
        "and `mistakes`: the picks each implementation mistake below gives.",
        "",
        "To make the outputs sensitive, the norms' affine parameters and BatchNorm statistics "
        "were moved off their defaults, the CTC head was scaled (x8) and centred, and the "
        f"attention decoders alone were trained {TRAIN_STEPS} Adam steps with WeNet's attention "
        "loss toward chosen n-best entries of each utterance, two on some (the JSON's "
        "`construction`); u2pp's right-to-left decoder toward other entries than its "
        "left-to-right one on utt0 and utt1 (loss (1 - rw) * left loss + rw * right loss, rw = "
        "0.3, each WeNet's `_calc_att_loss` at reverse_weight 0 and 1), so that the right "
        "decoder decides some picks. The n-best entry attention rescoring picks (#0 is CTC "
        "prefix beam search's best) per setting (ctc_weight, reverse_weight); the scores "
        "themselves are in the JSON:",
        "",
    ]
    for name, (_, decodes, _) in results.items():
        settings = SETTINGS[name]
        lines += ["| model | decoding_chunk_size | utterance | "
                  + " | ".join(f"({c}, {r})" for c, r in settings) + " |",
                  "|---|---|---|" + "---|" * len(settings)]
        for mode in decodes:
            for utt, rec in mode["utterances"].items():
                picks = [f"#{r['nbest_index']}" for r in rec["attention_rescoring"]]
                lines.append(f"| {name} | {mode['decoding_chunk_size']} | {utt} | "
                             + " | ".join(picks) + " |")
        lines.append("")
    lines += [
        "Each implementation mistake below, simulated with WeNet's own decoder module (inputs "
        "built with the mistake, or a copy of the decoder with its embeddings divided by "
        "sqrt(D)) and WeNet's rescoring formula, changes at least one of these picks, so "
        "tests that compare picks with the ones above catch it (checked by the script, as is "
        f"that the changed pick and each of WeNet's own win by at least {MIN_PICK_MARGIN}; the "
        "JSON's `mistakes` lists every pick, in the order decoding mode, utterance, setting):",
        "",
    ]
    for mistake, description in MISTAKE_DESCRIPTIONS.items():
        lines.append(f"- `{mistake}`: {description}.")
    lines += ["", "| model | mistake | picks changed | where: chunk, utterance, (ctc_weight, "
              "reverse_weight): WeNet's pick -> the mistake's |", "|---|---|---|---|"]
    for name, (_, decodes, mistakes) in results.items():
        places = [(mode["decoding_chunk_size"], utt, r["ctc_weight"], r["reverse_weight"],
                   r["nbest_index"]) for mode in decodes for utt in sorted(mode["utterances"])
                  for r in mode["utterances"][utt]["attention_rescoring"]]
        for mistake, rec in mistakes.items():
            where = [f"{c}, {u}, ({cw}, {rw}): #{p} -> #{q}"
                     for (c, u, cw, rw, p), q in zip(places, rec["picks"]) if p != q]
            lines.append(f"| {name} | `{mistake}` | {rec['num_differing']} of {len(places)} | "
                         + "; ".join(where) + " |")
    lines.append("")
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wenet", required=True, type=Path, help="WeNet source tree")
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"importing WeNet from --wenet (expected commit {WENET_COMMIT})")
    commit, clean = wenet_commit(args.wenet)
    if commit is not None and commit != WENET_COMMIT:
        raise SystemExit(f"--wenet is at {commit}, this script was run at {WENET_COMMIT}")
    if commit is not None and not clean:
        raise SystemExit("--wenet has local changes under wenet/")
    commit_info = ("checked: git rev-parse HEAD of --wenet, wenet/ unmodified" if commit else
                   "unchecked: --wenet was not a git work tree (e.g. a git archive export)")
    print(f"  --wenet commit: {commit_info}")
    wenet = import_wenet(args.wenet)

    gen = torch.Generator().manual_seed(SEED)
    utts = {utt: synthetic_frames(gen, frames) for utt, frames in UTT_FRAMES.items()}
    summary = {}
    results = {}
    for name in ("u2", "u2pp"):
        print(f"building {name}")
        config, targets, right_targets = build_model(wenet, name, args.out_dir, utts)
        folder = args.out_dir / name
        print(f"reloading {name} with wenet.cli.model.load_model and decoding")
        model = reload_model(wenet, folder)
        tensors, decodes, parity = run_reference(model, wenet, name, utts)
        summary[name] = summarize(name, decodes)
        mistakes = mistake_picks(model, name, utts, decodes)
        results[name] = (config, decodes, mistakes)
        write_outputs(folder, name, config, targets, right_targets, utts, tensors, decodes,
                      parity, mistakes, commit_info)
        print(f"  wrote {folder}/wenet_outputs.safetensors, wenet_outputs.json")
    write_readme(args.out_dir, results)
    print(f"wrote {args.out_dir}/README.md")
    for name, lines in summary.items():
        for chunk, utt, cw, rw, index in lines:
            print(f"{name}: chunk {chunk} {utt} ctc_weight {cw} reverse_weight {rw}: rescoring "
                  f"picks n-best #{index}, not #0")


if __name__ == "__main__":
    main()
