"""A WeNet-layout U2++-style checkpoint (synthetic, random weights, seeded) for
tests/api/test_speech_recognizer.cpp: the encoder of tests/api/data/conformer_micro_wenet_ctc.yaml
(causal depthwise convolution with LayerNorm after it, WeNet's relative positions, Conv2d x4
subsampling, global CMVN) under WeNet's state_dict names (encoder.*, ctc.ctc_lo.*), with an
attention decoder's tensors beside them as a full WeNet checkpoint has (attnzoo ignores them).

Names and shapes as wenet/transformer/encoder.py ConformerEncoder saves them with
cnn_module_norm="layer_norm", causal=True, pos_enc_layer_type="rel_pos",
input_layer="conv2d", use_cmvn=True (see tests/models/make_wenet_reference.py for the equations).

Writes OUT_DIR/wenet_ctc_micro.safetensors.

usage: make_wenet_ctc_checkpoint.py OUT_DIR
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import make_wenet_reference as wenet  # noqa: E402

# The sizes of conformer_micro_wenet_ctc.yaml: make_wenet_reference's, with 10 CTC outputs.
VOCAB = 10


def state_dict() -> dict:
    t = wenet.RandomTensors(11, torch.float32)
    sd = {}
    # Kaldi fbank of 16-bit audio lies around 5..15: a CMVN of that scale.
    sd["encoder.global_cmvn.mean"] = 9.0 + t.normal(wenet.FEATS, scale=1.0)
    sd["encoder.global_cmvn.istd"] = 0.3 + 0.2 * t.uniform(wenet.FEATS)
    # causal: the depthwise convolution's weights as a centred one's (the input padded by
    # KERNEL - 1 frames on the left); its norm a LayerNorm, without running statistics.
    wenet.encoder_tensors(sd, t, batch_norm=False)
    # Seed and scales chosen so that the synthetic audio of the test gives several distinct tokens.
    sd["ctc.ctc_lo.weight"] = t.normal(VOCAB, wenet.DIM, scale=0.4)
    sd["ctc.ctc_lo.bias"] = t.normal(VOCAB, scale=0.1)
    sd["decoder.embed.0.weight"] = t.normal(VOCAB, wenet.DIM, scale=1.0)
    sd["decoder.output_layer.weight"] = t.normal(VOCAB, wenet.DIM, scale=1.0)
    return {k: v.float().contiguous() for k, v in sd.items()}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    save_file(state_dict(), str(out / "wenet_ctc_micro.safetensors"))


if __name__ == "__main__":
    main()
