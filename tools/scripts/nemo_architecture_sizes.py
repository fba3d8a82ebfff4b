"""The parameter counts NeMo itself gives the NeMo architectures of the zoo
(configs/conformer/parakeet-*.yaml, fastconformer-hybrid-large-streaming.yaml), for
tests/configs/test_conformer_zoo.cpp.

    nemo_architecture_sizes.py OUT.json

Each architecture is built with random weights by NeMo's own model classes (the pinned
nemo_toolkit 3.0.0, with its ASR imports from <venv>/nemo-asr and <venv>/espnet-inference, as
tools/setup.sh installs them) from a config in NeMo's keys with the sizes the zoo's YAML states:
EncDecCTCModel, EncDecRNNTModel (TDT) or EncDecHybridRNNTCTCModel (TDT or RNN-T; the streaming
one cache-aware: causal subsampling and convolutions, LayerNorm, chunked_limited attention with
NeMo's four look-aheads) over a vocabulary of as many
characters as the model's SentencePiece tokens (the parameters do not depend on the tokenizer).
Its parameters are counted, the preprocessor's (none) left out. Building the 1.1B model takes a
few GB of memory and about a minute; nothing is downloaded.
"""
import json
import logging
import sys
from pathlib import Path

for extra in ("nemo-asr", "espnet-inference"):
    sys.path.insert(0, str(Path(sys.prefix) / extra))
logging.disable(logging.WARNING)

import torch  # noqa: E402

# name: (encoder layers, width, mels, xscaling, use_bias, tokens, head, prediction LSTM layers)
ARCHITECTURES = {
    "parakeet-tdt-0.6b-v3": (24, 1024, 128, False, False, 8192, "tdt", 2),
    "parakeet-tdt-0.6b-v2": (24, 1024, 128, False, False, 1024, "tdt", 2),
    "parakeet-ctc-0.6b": (24, 1024, 80, True, True, 1024, "ctc", 0),
    "parakeet-ctc-1.1b": (42, 1024, 80, True, True, 1024, "ctc", 0),
    "parakeet-tdt_ctc-110m": (17, 512, 80, False, True, 1024, "hybrid", 1),
    "fastconformer-hybrid-large-streaming": (17, 512, 80, True, True, 1024, "streaming", 1),
}
DURATIONS = [0, 1, 2, 3, 4]


def config(layers, width, mels, xscaling, use_bias, tokens, head, pred_layers):
    labels = [f"t{i}" for i in range(tokens)]
    ctc = {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": width,
           "num_classes": tokens, "vocabulary": labels}
    cfg = {
        "sample_rate": 16000, "labels": labels,
        "train_ds": None, "validation_ds": None, "test_ds": None, "optim": None,
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025,
            "window_stride": 0.01, "window": "hann", "features": mels, "n_fft": 512,
            "log": True, "frame_splicing": 1, "dither": 0.0, "pad_to": 0, "pad_value": 0.0},
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder", "feat_in": mels,
            "feat_out": -1, "n_layers": layers, "d_model": width, "subsampling": "dw_striding",
            "subsampling_factor": 8, "subsampling_conv_channels": 256,
            "causal_downsampling": False, "ff_expansion_factor": 4,
            "self_attention_model": "rel_pos", "n_heads": 8, "att_context_size": [-1, -1],
            "att_context_style": "regular", "xscaling": xscaling, "untie_biases": True,
            "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
            "conv_context_size": None, "use_bias": use_bias, "dropout": 0.0,
            "dropout_pre_encoder": 0.0, "dropout_emb": 0.0, "dropout_att": 0.0},
        "decoding": {"strategy": "greedy_batch"},
    }
    if head == "ctc":
        cfg["decoder"] = ctc
        return cfg
    cfg["model_defaults"] = {"enc_hidden": width, "pred_hidden": 640, "joint_hidden": 640}
    cfg["decoder"] = {"_target_": "nemo.collections.asr.modules.RNNTDecoder",
                      "normalization_mode": None, "random_state_sampling": False,
                      "blank_as_pad": True, "vocab_size": tokens,
                      "prednet": {"pred_hidden": 640, "pred_rnn_layers": pred_layers,
                                  "t_max": None, "dropout": 0.0}}
    cfg["joint"] = {"_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None,
                    "preserve_memory": False, "fuse_loss_wer": False, "fused_batch_size": 4,
                    "num_classes": tokens, "vocabulary": labels,
                    "num_extra_outputs": len(DURATIONS),
                    "jointnet": {"encoder_hidden": width, "pred_hidden": 640,
                                 "joint_hidden": 640, "activation": "relu", "dropout": 0.0}}
    cfg["decoding"] = {"strategy": "greedy_batch", "model_type": "tdt", "durations": DURATIONS,
                       "greedy": {"max_symbols": 10}}
    cfg["loss"] = {"loss_name": "tdt", "tdt_kwargs": {"durations": DURATIONS, "sigma": 0.05,
                                                      "omega": 0.1}}
    if head == "streaming":
        # An RNN-T (no durations), cache-aware.
        del cfg["joint"]["num_extra_outputs"]
        cfg["decoding"] = {"strategy": "greedy_batch", "greedy": {"max_symbols": 10}}
        cfg["loss"] = {"loss_name": "default"}
        cfg["preprocessor"]["normalize"] = "NA"
        cfg["encoder"].update({
            "causal_downsampling": True, "att_context_style": "chunked_limited",
            "att_context_size": [[70, 13], [70, 6], [70, 1], [70, 0]],
            "att_context_probs": [0.25, 0.25, 0.25, 0.25], "conv_context_size": "causal",
            "conv_norm_type": "layer_norm"})
    if head in ("hybrid", "streaming"):
        cfg["aux_ctc"] = {"ctc_loss_weight": 0.3, "use_cer": False, "decoder": ctc,
                          "decoding": {"strategy": "greedy"}}
    return cfg


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    import nemo
    from nemo.collections.asr.models import (EncDecCTCModel, EncDecHybridRNNTCTCModel,
                                             EncDecRNNTModel)
    from omegaconf import OmegaConf

    classes = {"ctc": EncDecCTCModel, "tdt": EncDecRNNTModel, "hybrid": EncDecHybridRNNTCTCModel,
               "streaming": EncDecHybridRNNTCTCModel}
    out = {"nemo_toolkit": nemo.__version__, "torch": torch.__version__, "models": {}}
    for name, architecture in ARCHITECTURES.items():
        head = architecture[6]
        model = classes[head](cfg=OmegaConf.create(config(*architecture)), trainer=None)
        count = sum(p.numel() for n, p in model.named_parameters()
                    if not n.startswith("preprocessor."))
        out["models"][name] = {"target": type(model).__name__, "parameters": count}
        print(f"{name}: {count} parameters ({type(model).__name__})", flush=True)
        del model
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
