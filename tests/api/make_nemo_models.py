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
            tied across layers, LayerNorm in the convolution module, kernel 5, attention limited
            to 12 frames before and 3 after (att_context_size [12, 3]).
  ctc_wpe   EncDecCTCModelBPE with a WordPiece tokenizer (tokenizer.type wpe: a vocab.txt of
            BERT's special tokens, letters, "##" letters and a few words; NeMo's Hugging Face
            BertTokenizer read from a local folder instead of the hub), dw_striding x4.
  local_ctc_bpe
            ctc_bpe with NeMo's local attention (rel_pos_local_attn, Longformer's sliding window)
            of 5 frames on each side.
  global_ctc_bpe
            local attention of 4 frames on each side with Longformer's global tokens: 3 frames,
            5 apart, with projections of their own (global_attn_separate).
  vggnet_ctc_bpe
            ctc_bpe with vggnet subsampling x8 (two 3x3 convolutions and a max pool per factor
            of 2). NeMo 3.0.0's masked convolution stack cannot run it (it reads MaxPool2d's int
            kernel_size as a pair), so its stack here masks as NeMo 3.0.0 does for the other
            kinds, with the pools' lengths as NeMo's calc_length counts them (ceil): for one
            utterance alone the plain nn.Sequential of NeMo releases before the masking
            (vggnet_masking).
  rnnt_bpe, tdt_bpe
            EncDecRNNTBPEModel, RNN-T and TDT (durations 0-4, two LSTM layers; as Parakeet 0.6B,
            no biases in the blocks and no xscaling), their joints made sensitive
            (sensitive_transducer): many tokens on one frame.
  hybrid_bpe, hybrid_tdt_bpe
            EncDecHybridRNNTCTCBPEModel, RNN-T or TDT with the auxiliary CTC head, their joints
            as confident as trained ones (confident_transducer), for NeMo's beam search; the TDT
            one's joint without dropout (so without NeMo's Dropout module in it).
  streaming_hybrid_bpe
            the hybrid of NeMo's cache-aware streaming recipes: causal subsampling and
            convolutions, chunked_limited attention with three look-aheads ([14, 6] first, which
            NeMo runs), LayerNorm in the convolution module, unnormalised features.

Audio: AUDIO_DIR/speech_16k.wav and other_voice_16k.wav (tests/preprocess/make_audio_reference.py,
espeak-ng), cut and mixed here into three utterances of 1.3 to 2.6 s.

Writes into OUT_DIR:
  <model>.nemo            as NeMo's save_to wrote it
  <model>_unpacked/       ctc_bpe, hybrid_tdt_bpe and streaming_hybrid_bpe unpacked (tarfile)
  ctc_char_gz.nemo        ctc_char.nemo gzipped, as NeMo before 1.7 wrote them
  waves/<wave>.wav        16 kHz mono, 16 bit
  nemo_reference.safetensors  "<model>/<wave>/features" [T, F] (the preprocessor's output cut to
                          its length), ".../encoded" [T', D], ".../log_probs" [T', V] (float32)
  manifest.json           versions; per model its target, kind, NeMo's parameter count and the
                          CTC head's gain (its weight's largest row sum of |w|), per wave the greedy
                          hypotheses of NeMo's transcribe() and of its transducer searches (tokens,
                          frames, durations, score, text) and, for the offline hybrids, every
                          hypothesis of NeMo's transducer beam search; for the streaming model, NeMo's
                          cache-aware streaming: its feature and encoder frames per step, the
                          tokens of its streaming greedy search, and ".../streamed" [T', D];
                          for ctc_wpe, NeMo's WordPiece text -> ids -> text on a few texts

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
BEAM_SIZE = 4

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


def transducer_config(features, tokenizer_dir, durations=None, hybrid=False, encoder_changes=None):
    """An RNN-T (or, with durations, TDT) FastConformer in the keys of NeMo's transducer
    recipes; with hybrid, the hybrid model's auxiliary CTC head too."""
    cfg = model_config(features, "per_feature", encoder_changes or {}, tokenizer_dir)
    del cfg["decoder"]
    cfg["model_defaults"] = {"enc_hidden": 64, "pred_hidden": 48, "joint_hidden": 40}
    cfg["decoder"] = {"_target_": "nemo.collections.asr.modules.RNNTDecoder",
                      "normalization_mode": None, "random_state_sampling": False,
                      "blank_as_pad": True,
                      "prednet": {"pred_hidden": 48, "pred_rnn_layers": 2 if durations else 1,
                                  "t_max": None, "dropout": 0.2}}
    cfg["joint"] = {"_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None,
                    "preserve_memory": False, "fuse_loss_wer": False, "fused_batch_size": 4,
                    "jointnet": {"joint_hidden": 40, "activation": "relu", "dropout": 0.2}}
    cfg["decoding"] = {"strategy": "greedy_batch", "greedy": {"max_symbols": 10}}
    cfg["loss"] = {"loss_name": "default"}
    if durations:
        cfg["joint"]["num_extra_outputs"] = len(durations)
        cfg["decoding"].update({"model_type": "tdt", "durations": durations})
        cfg["loss"] = {"loss_name": "tdt", "tdt_kwargs": {"durations": durations, "sigma": 0.05,
                                                          "omega": 0.1}}
    if hybrid and durations:
        # No Dropout in the joint: its Linear is joint_net.1, not joint_net.2.
        cfg["joint"]["jointnet"]["dropout"] = 0.0
    if hybrid:
        cfg["aux_ctc"] = {"ctc_loss_weight": 0.3, "use_cer": False,
                          "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder",
                                      "feat_in": 64, "num_classes": -1, "vocabulary": []},
                          "decoding": {"strategy": "greedy"}}
    return cfg


def streaming_config(cfg):
    """A cache-aware streaming model's preprocessor: no normalisation (NeMo's streaming
    recipes)."""
    cfg["preprocessor"]["normalize"] = "NA"
    return cfg


WORDPIECE_WORDS = ["the", "sea", "she", "box", "five", "over", "speech", "seven", "quick",
                   "##ing", "##er", "##ed", "'", ".", ","]


def make_wordpiece(work):
    """A WordPiece vocabulary (BERT's special tokens, letters, their "##" continuations and a few
    words), and a local folder that stands in for the Hugging Face tokenizer NeMo names for wpe
    models ('bert-base-cased', which would be downloaded): BertTokenizer with its default
    settings, cased as bert-base-cased."""
    folder = work / "wordpiece"
    folder.mkdir()
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + letters + ["##" + c for c in letters]
             + WORDPIECE_WORDS)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": False}))
    return folder


def local_wordpiece(folder):
    """NeMo builds a wpe tokenizer as AutoTokenizer('bert-base-cased', vocab_file=...): point it
    at `folder` instead, offline."""
    from nemo.collections.asr.parts.mixins import mixins

    original = mixins.tokenizers.AutoTokenizer

    def auto_tokenizer(pretrained_model_name, **kwargs):
        if pretrained_model_name == "bert-base-cased":
            pretrained_model_name = str(folder)
        return original(pretrained_model_name=pretrained_model_name, **kwargs)

    mixins.tokenizers.AutoTokenizer = auto_tokenizer


def wordpiece_reference(model):
    """NeMo's wpe tokenizer: texts with words it has, words it cuts into pieces, punctuation and
    a character it cannot cover, cut into ids (text_to_ids); and token sequences joined into text
    as NeMo's ASR decoding joins them (tokens_to_text of ids_to_tokens: BERT's special tokens
    kept, a leading continuation, punctuation)."""
    tokenizer = model.tokenizer
    texts = ["the quick fox", "she sells sea shells.", "speeches, boxes'", "seven \u20ac five",
             "over the sea! quick?", "don't stop"]
    joins = [["##h", "e", "[MASK]", "##m", ",", "x", "'", "s", "[PAD]"],
             ["the", "sea", ".", "s", "##h", "##e", "'", "s", "##ed", "[SEP]", "[UNK]", "a"],
             [".", "quick", "##er", "?", "!", "##s"]]
    return {
        "texts": [{"text": text, "ids": [int(i) for i in tokenizer.text_to_ids(text)]}
                  for text in texts],
        "joins": [{"tokens": tokens, "text": tokenizer.tokens_to_text(tokens)} for tokens in joins],
    }


def vggnet_masking(model):
    """Lets NeMo 3.0.0 run vggnet subsampling: its MaskedConvSequential's masking, with the max
    pools' output lengths (ceil mode) that NeMo's own calc_length gives."""
    from nemo.collections.asr.parts.submodules import subsampling

    class MaskedVggSequential(subsampling.MaskedConvSequential):
        def forward(self, x, lengths):
            x = x.unsqueeze(1)
            lengths = lengths.clone().long()
            mask = self._create_mask(x, lengths)
            for layer in self:
                x = layer(subsampling.apply_channel_mask(x, mask))
                if isinstance(layer, torch.nn.MaxPool2d):
                    lengths = (lengths + 1) // 2
                    mask = self._create_mask(x, lengths)
            return subsampling.apply_channel_mask(x, mask), lengths

    model.encoder.pre_encode.conv.__class__ = MaskedVggSequential


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


def encoded_frames(model, waves):
    """The encoder's valid output frames of every wave, one after another: [N, D]."""
    frames = []
    with torch.no_grad():
        for x in waves.values():
            signal = torch.from_numpy(x)[None]
            features, length = model.preprocessor(input_signal=signal,
                                                  length=torch.tensor([signal.shape[1]]))
            encoded, n = model.encoder(audio_signal=features, length=length)
            frames.append(encoded[0, :, : int(n[0])].T)
    return torch.cat(frames)


def varying_directions(frames, rows, generator, k=16):
    """A [rows, D] projection onto random mixes of the k principal directions of `frames` (centred,
    scaled to unit variance), with outputs of unit variance over the frames, and the bias that
    centres it."""
    mean = frames.mean(0)
    _, singular, directions = torch.linalg.svd(frames - mean, full_matrices=False)
    k = min(k, directions.shape[0])
    basis = directions[:k] / singular[:k, None] * frames.shape[0] ** 0.5
    weight = torch.randn(rows, k, generator=generator) / k**0.5 @ basis
    return weight, -weight @ mean


def sensitive_transducer(model, waves, generator):
    """The joint network, made to read what varies between frames (as sensitive_head), its
    prediction-network side scaled up so that the tokens emitted so far matter too, and the
    blank's bias set so that 60% of the frames end on a blank from the start state; a TDT joint's
    shortest durations favoured."""
    frames = encoded_frames(model, waves)
    joint = model.joint
    with torch.no_grad():
        weight, bias = varying_directions(frames, joint.enc.weight.shape[0], generator)
        joint.enc.weight.copy_(2.0 * weight)
        joint.enc.bias.copy_(2.0 * bias)
        out = joint.joint_net[-1]
        out.weight.copy_(torch.randn(out.weight.shape, generator=generator)
                         * 2.0 / out.weight.shape[1] ** 0.5)
        out.bias.zero_()
        joint.pred.weight.mul_(8.0)
        start, _ = model.decoder.predict(None, None, add_sos=False, batch_size=1)
        logits = joint.joint(frames[None], start)[0, :, 0]
        tokens = logits.shape[-1] - joint.num_extra_outputs
        blank = tokens - 1
        margin = logits[:, :blank].max(-1).values - logits[:, blank]
        out.bias[blank] = margin.quantile(0.6)
        if joint.num_extra_outputs:
            # TDT: durations 0 and 1 (more tokens, and tokens at the same frame) a little ahead.
            out.bias[tokens] = 1.0
            out.bias[tokens + 1] = 1.5


def confident_transducer(model, waves, generator):
    """A transducer that behaves as a trained one does where beam search is concerned: each
    frame's probabilities are peaked, most frames end on a blank, and a token just emitted is
    not emitted again at once (so that NeMo's default beam search, which has no bound on the
    tokens of one frame, ends each frame after a few expansions; on sensitive_transducer's joint
    it runs for minutes).

    The prediction network passes the last token through: embedding row k is the unit vector
    e_k, each LSTM layer's input, forget and output gates saturated open, shut and open, its cell
    input tanh(4·x), so that its output is about 0.76·e_k (and 0 from the start), plus small
    noise. The joint's hidden unit k reads token k's evidence from the frame (a random mix of
    the frames' principal directions, unit variance) minus 4 when k was the last token; token k's
    logit is 8 times that unit (after the ReLU), the blank's a constant that 70% of the frames'
    best token stays under; a TDT joint's durations are random mixes of the units."""
    frames = encoded_frames(model, waves)
    joint, prediction = model.joint, model.decoder.prediction
    out = joint.joint_net[-1]
    with torch.no_grad():
        embed = prediction["embed"].weight
        tokens = embed.shape[0] - 1  # without the blank (the padding row, last)
        hidden = embed.shape[1]
        embed.zero_()
        embed[:tokens, :tokens] = torch.eye(tokens)
        lstm = prediction["dec_rnn"].lstm
        for layer in range(lstm.num_layers):
            w_ih, w_hh = getattr(lstm, f"weight_ih_l{layer}"), getattr(lstm, f"weight_hh_l{layer}")
            b_ih, b_hh = getattr(lstm, f"bias_ih_l{layer}"), getattr(lstm, f"bias_hh_l{layer}")
            w_ih.copy_(0.01 * torch.randn(w_ih.shape, generator=generator))
            w_hh.copy_(0.01 * torch.randn(w_hh.shape, generator=generator))
            w_ih[2 * hidden:3 * hidden] += 4.0 * torch.eye(hidden)
            b_hh.zero_()
            b_ih.copy_(torch.cat([torch.full((hidden,), 10.0), torch.full((hidden,), -10.0),
                                  torch.zeros(hidden), torch.full((hidden,), 10.0)]))
        weight, bias = varying_directions(frames, tokens, generator)
        joint.enc.weight.zero_()
        joint.enc.bias.zero_()
        joint.enc.weight[:tokens] = weight
        joint.enc.bias[:tokens] = bias
        joint.pred.weight.zero_()
        joint.pred.bias.zero_()
        joint.pred.weight[:tokens, :tokens] = -4.0 / 0.76 * torch.eye(tokens)
        out.weight.zero_()
        out.bias.zero_()
        out.weight[:tokens, :tokens] = 8.0 * torch.eye(tokens)
        best = (8.0 * torch.relu(frames @ weight.T + bias)).max(-1).values
        out.bias[tokens] = best.quantile(0.7)
        if joint.num_extra_outputs:
            durations = out.weight[tokens + 1:]
            durations.copy_(torch.randn(durations.shape, generator=generator) * 0.5)


def sensitive_head(model, waves, generator):
    """The CTC head, made to read what varies between frames. A random encoder's frames share a
    large common part, so a random head gives one token everywhere: here the head is a random
    mix of the 16 principal directions of the encoded frames of `waves` (centred), scaled to
    logits of a few units, with the blank a little ahead, so that tokens follow the input."""
    frames = encoded_frames(model, waves)
    layer = (model.ctc_decoder if hasattr(model, "ctc_decoder") else model.decoder).decoder_layers[0]
    with torch.no_grad():
        weight, bias = varying_directions(frames, layer.weight.shape[0], generator)
        layer.weight.copy_(6.0 * weight[:, :, None])
        layer.bias.copy_(6.0 * bias)
        layer.bias[-1] += 2.0  # NeMo's blank is the last class


def features_and_encoded(model, x):
    """NeMo's preprocessor and encoder on one wave: features [T, F], encoded [T', D]."""
    signal = torch.from_numpy(x)[None]
    length = torch.tensor([signal.shape[1]])
    # transcribe() leaves the model in training mode (dropout on): eval again each time.
    model.eval()
    with torch.no_grad():
        features, feature_length = model.preprocessor(input_signal=signal, length=length)
        encoded, encoded_length = model.encoder(audio_signal=features, length=feature_length)
    t, n = int(feature_length[0]), int(encoded_length[0])
    return features[0, :, :t].T.contiguous(), encoded[:, :, :n]


def ctc_result(model, x, decoder):
    """The CTC head's log-probabilities [T', V] and NeMo's greedy transcription."""
    _, encoded = features_and_encoded(model, x)
    with torch.no_grad():
        log_probs = decoder(encoder_output=encoded)[0].contiguous()
    hypothesis = model.transcribe([x], batch_size=1, verbose=False)[0]
    # A CTC hypothesis's y_sequence is the best class of each frame; its tokens are those with
    # repeats merged and blanks (the last class) dropped.
    blank = log_probs.shape[-1] - 1
    frames = [int(i) for i in hypothesis.y_sequence]
    tokens = [k for i, k in enumerate(frames) if k != blank and (i == 0 or k != frames[i - 1])]
    return log_probs, {"text": hypothesis.text, "token_ids": tokens, "frames": len(frames)}


def transducer_results(model, x, beam=True):
    """NeMo's greedy transducer decoding (GreedyRNNTInfer / GreedyTDTInfer, the frame-by-frame
    loop, called directly so that its hypothesis keeps each token's frame): tokens, frames, TDT
    durations, the score and the text; and the tokens and text of transcribe() with the batched
    greedy search (greedy_batch) that NeMo's configs choose."""
    from omegaconf import open_dict

    hybrid = hasattr(model, "ctc_decoder")
    _, encoded = features_and_encoded(model, x)
    out = {}
    for strategy in ("greedy", "greedy_batch"):
        cfg = model.cfg.decoding
        with open_dict(cfg):
            cfg.strategy = strategy
            cfg.tdt_include_token_duration = True
        model.change_decoding_strategy(cfg, verbose=False,
                                       **({"decoder_type": "rnnt"} if hybrid else {}))
        model.eval()
        if strategy == "greedy":
            with torch.no_grad():
                (hypothesis,) = model.decoding.decoding(
                    encoder_output=encoded, encoded_lengths=torch.tensor([encoded.shape[-1]]))[0]
            ids = [int(i) for i in hypothesis.y_sequence]
            out = {"text": model.tokenizer.ids_to_text(ids), "token_ids": ids,
                   "token_frames": [int(i) for i in hypothesis.timestamp],
                   "score": float(hypothesis.score)}
            if hypothesis.token_duration is not None and len(hypothesis.token_duration):
                out["token_durations"] = [int(i) for i in hypothesis.token_duration]
        else:
            hypothesis = model.transcribe([x], batch_size=1, verbose=False)[0]
            out["batched_text"] = hypothesis.text
            out["batched_token_ids"] = [int(i) for i in hypothesis.y_sequence]
    if hybrid and beam:
        out["beam"] = beam_results(model, encoded)
    return out


def beam_results(model, encoded):
    """NeMo's `strategy: beam` (BeamRNNTInfer / BeamTDTInfer, search_type default) with
    BEAM_SIZE and score_norm, every hypothesis it keeps, best first: tokens, the frame of each
    (for TDT NeMo's timestamp: the frame plus the token's duration), score and text."""
    from omegaconf import open_dict

    cfg = model.cfg.decoding
    with open_dict(cfg):
        cfg.strategy = "beam"
        cfg.beam = {"beam_size": BEAM_SIZE, "return_best_hypothesis": False, "score_norm": True}
    model.change_decoding_strategy(cfg, verbose=False,
                                   **({"decoder_type": "rnnt"} if hasattr(model, "ctc_decoder")
                                      else {}))
    model.eval()
    with torch.no_grad():
        (nbest,) = model.decoding.decoding(
            encoder_output=encoded, encoded_lengths=torch.tensor([encoded.shape[-1]]))[0]
    out = []
    for hypothesis in nbest.n_best_hypotheses:
        ids = [int(i) for i in hypothesis.y_sequence]
        out.append({"token_ids": ids, "token_frames": [int(i) for i in hypothesis.timestamp],
                    "score": float(hypothesis.score), "text": model.tokenizer.ids_to_text(ids)})
    return out


def streaming_results(model, x):
    """NeMo's cache-aware streaming of one wave, as its cache-aware streaming example runs it:
    CacheAwareStreamingAudioBuffer cuts the features into NeMo's chunks (with the pre-encode cache
    before each), conformer_stream_step encodes each with the caches and decodes it greedily
    (GreedyRNNTInfer, the transducer's hypothesis carried over from step to step). -> the new
    feature frames and encoder frames of each step, the encoder frames [T', D], and the tokens."""
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer
    from omegaconf import open_dict

    cfg = model.cfg.decoding
    with open_dict(cfg):
        cfg.strategy = "greedy"
    model.change_decoding_strategy(cfg, decoder_type="rnnt", verbose=False)
    model.eval()
    encoder = model.encoder
    recorded = []
    step_encoder = encoder.cache_aware_stream_step

    def recording_step(*args, **kwargs):
        out = step_encoder(*args, **kwargs)
        recorded.append(out[0][0, :, : int(out[1][0])].T.contiguous())
        return out

    encoder.cache_aware_stream_step = recording_step
    try:
        buffer = CacheAwareStreamingAudioBuffer(model=model, online_normalization=False)
        buffer.append_audio(x)
        total = buffer.buffer.size(-1)
        channel, time, channel_len = encoder.get_initial_cache_state(batch_size=1)
        hypotheses, consumed, feature_steps = None, 0, []
        with torch.no_grad():
            for step, (chunk, lengths) in enumerate(buffer):
                feature_steps.append(min(buffer.buffer_idx, total) - consumed)
                consumed = min(buffer.buffer_idx, total)
                (_, _, channel, time, channel_len, hypotheses) = model.conformer_stream_step(
                    processed_signal=chunk, processed_signal_length=lengths,
                    cache_last_channel=channel, cache_last_time=time,
                    cache_last_channel_len=channel_len,
                    keep_all_outputs=buffer.is_buffer_empty(), previous_hypotheses=hypotheses,
                    drop_extra_pre_encoded=0 if step == 0
                    else encoder.streaming_cfg.drop_extra_pre_encoded,
                    return_transcription=True)
    finally:
        del encoder.cache_aware_stream_step
    ids = [int(i) for i in hypotheses[0].y_sequence]
    return torch.cat(recorded), {
        "chunk_size": int(encoder.att_context_size[1]) + 1,
        "feature_steps": feature_steps,
        "encoded_steps": [int(r.shape[0]) for r in recorded],
        "token_ids": ids,
        "text": model.tokenizer.ids_to_text(ids),
    }


def reference(model, kind, waves, streaming=False):
    """Per wave: the preprocessor's features, the encoder's output, and each head's results: the
    CTC log-probabilities and greedy transcription, the transducer's greedy transcription."""
    tensors, results = {}, {}
    for name, x in waves.items():
        features, encoded = features_and_encoded(model, x)
        tensors[f"{name}/features"] = features
        tensors[f"{name}/encoded"] = encoded[0].T.contiguous()
        result = {"frames": int(encoded.shape[-1])}
        if kind in ("rnnt", "tdt", "hybrid"):
            result["transducer"] = transducer_results(model, x, beam=not streaming)
        if kind in ("ctc", "hybrid"):
            if kind == "hybrid":
                model.change_decoding_strategy(decoder_type="ctc", verbose=False)
            decoder = model.ctc_decoder if kind == "hybrid" else model.decoder
            tensors[f"{name}/log_probs"], result["ctc"] = ctc_result(model, x, decoder)
        if streaming:
            tensors[f"{name}/streamed"], result["streaming"] = streaming_results(model, x)
        results[name] = result
    return tensors, results


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    waves = make_waves(sys.argv[1], out)

    import nemo
    from nemo.collections.asr.models import (EncDecCTCModel, EncDecCTCModelBPE,
                                             EncDecHybridRNNTCTCBPEModel, EncDecRNNTBPEModel)
    from omegaconf import OmegaConf

    characters = [" ", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o",
                  "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "'"]
    all_tensors, summary = {}, {"nemo_toolkit": nemo.__version__, "torch": torch.__version__,
                                "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = make_tokenizer(Path(tmp))
        wordpiece = make_wordpiece(Path(tmp))
        local_wordpiece(wordpiece)
        wpe_config = model_config(80, "per_feature", {"subsampling_factor": 4}, wordpiece)
        wpe_config["tokenizer"]["type"] = "wpe"
        models = {
            "ctc_bpe": (EncDecCTCModelBPE, "ctc", model_config(80, "per_feature", {}, tokenizer)),
            "ctc_char": (EncDecCTCModel, "ctc", model_config(
                64, "all_features",
                {"subsampling": "striding", "subsampling_factor": 4, "xscaling": False,
                 "untie_biases": False, "conv_norm_type": "layer_norm", "conv_kernel_size": 5,
                 "att_context_size": [12, 3]},
                vocabulary=characters)),
            "rnnt_bpe": (EncDecRNNTBPEModel, "rnnt", transducer_config(80, tokenizer)),
            "tdt_bpe": (EncDecRNNTBPEModel, "tdt", transducer_config(
                80, tokenizer, durations=[0, 1, 2, 3, 4],
                encoder_changes={"use_bias": False, "xscaling": False})),
            "hybrid_bpe": (EncDecHybridRNNTCTCBPEModel, "hybrid",
                           transducer_config(80, tokenizer, hybrid=True)),
            "hybrid_tdt_bpe": (EncDecHybridRNNTCTCBPEModel, "hybrid", transducer_config(
                80, tokenizer, durations=[0, 1, 2, 3, 4], hybrid=True)),
            "ctc_wpe": (EncDecCTCModelBPE, "ctc", wpe_config),
            "local_ctc_bpe": (EncDecCTCModelBPE, "ctc", model_config(
                80, "per_feature",
                {"self_attention_model": "rel_pos_local_attn", "att_context_size": [5, 5]},
                tokenizer)),
            "streaming_hybrid_bpe": (EncDecHybridRNNTCTCBPEModel, "hybrid", streaming_config(
                transducer_config(80, tokenizer, hybrid=True, encoder_changes={
                    "causal_downsampling": True, "att_context_style": "chunked_limited",
                    "att_context_size": [[14, 6], [14, 1], [14, 0]],
                    "att_context_probs": [0.4, 0.3, 0.3], "conv_context_size": "causal",
                    "conv_norm_type": "layer_norm"}))),
            "global_ctc_bpe": (EncDecCTCModelBPE, "ctc", model_config(
                80, "per_feature",
                {"self_attention_model": "rel_pos_local_attn", "att_context_size": [4, 4],
                 "global_tokens": 3, "global_tokens_spacing": 5, "global_attn_separate": True},
                tokenizer)),
            "vggnet_ctc_bpe": (EncDecCTCModelBPE, "ctc", model_config(
                80, "per_feature", {"subsampling": "vggnet"}, tokenizer)),
        }
        for index, (name, (cls, kind, cfg)) in enumerate(models.items()):
            torch.manual_seed(SEED + index)
            model = cls(cfg=OmegaConf.create(cfg), trainer=None)
            if name.startswith("vggnet"):
                vggnet_masking(model)
            generator = torch.Generator().manual_seed(SEED + 100 + index)
            off_identity(model, generator)
            model.eval()
            if kind in ("ctc", "hybrid"):
                sensitive_head(model, waves, generator)
            if kind == "hybrid":
                confident_transducer(model, waves, generator)
            elif kind != "ctc":
                sensitive_transducer(model, waves, generator)
            path = out / f"{name}.nemo"
            model.save_to(str(path))
            # What a user's file gives: the model as NeMo restores it.
            restored = cls.restore_from(str(path), map_location="cpu")
            if name.startswith("vggnet"):
                vggnet_masking(restored)
            restored.eval()
            tensors, results = reference(restored, kind, waves,
                                         streaming=name.startswith("streaming"))
            all_tensors.update({f"{name}/{key}": value for key, value in tensors.items()})
            summary["models"][name] = {
                "target": f"{cls.__module__}.{cls.__name__}",
                "kind": kind,
                "parameters": sum(p.numel() for p in restored.parameters()),
                "waves": results,
            }
            if kind in ("ctc", "hybrid"):
                # How far an encoder difference can move a logit: the head's largest row sum.
                head = restored.ctc_decoder if kind == "hybrid" else restored.decoder
                summary["models"][name]["ctc_head_gain"] = float(
                    head.decoder_layers[0].weight.abs().sum((1, 2)).max())
            if name == "ctc_wpe":
                summary["models"][name]["wordpiece"] = wordpiece_reference(restored)
            print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters; "
                  + "; ".join(f"{w}: {r['frames']} frames, "
                              + ", ".join(f"{head} {r[head]['text'][:50]!r}"
                                          for head in ("ctc", "transducer") if head in r)
                              for w, r in results.items()), flush=True)
    # The same files as users also hold them: unpacked into a folder, and gzipped (NeMo before
    # 1.7 wrote .nemo files so, and still reads them).
    for name in ("ctc_bpe", "hybrid_tdt_bpe", "streaming_hybrid_bpe"):
        with tarfile.open(out / f"{name}.nemo") as tar:
            tar.extractall(out / f"{name}_unpacked", filter="data")
    (out / "ctc_char_gz.nemo").write_bytes(gzip.compress((out / "ctc_char.nemo").read_bytes(),
                                                         mtime=0))
    save_file(all_tensors, str(out / "nemo_reference.safetensors"))
    (out / "manifest.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
