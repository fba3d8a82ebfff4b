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
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

# Shared with conformer_micro_wenet_ctc.yaml.
FEATS, DIM, HEADS, FFN, BLOCKS, KERNEL, VOCAB = 20, 16, 4, 32, 2, 5, 10


def state_dict() -> dict:
    g = torch.Generator().manual_seed(11)

    def r(*shape, scale):
        return torch.randn(*shape, generator=g) * scale

    def norm(prefix, sd):
        sd[prefix + ".weight"] = 1.0 + r(DIM, scale=0.1)
        sd[prefix + ".bias"] = r(DIM, scale=0.1)

    def linear(prefix, sd, out_dim, in_dim, bias=True):
        sd[prefix + ".weight"] = r(out_dim, in_dim, scale=1.0 / math.sqrt(in_dim))
        if bias:
            sd[prefix + ".bias"] = r(out_dim, scale=0.1)

    sd = {}
    # Kaldi fbank of 16-bit audio lies around 5..15: a CMVN of that scale.
    sd["encoder.global_cmvn.mean"] = 9.0 + r(FEATS, scale=1.0)
    sd["encoder.global_cmvn.istd"] = 0.3 + 0.2 * torch.rand(FEATS, generator=g)
    sd["encoder.embed.conv.0.weight"] = r(DIM, 1, 3, 3, scale=0.3)
    sd["encoder.embed.conv.0.bias"] = r(DIM, scale=0.1)
    sd["encoder.embed.conv.2.weight"] = r(DIM, DIM, 3, 3, scale=1.0 / math.sqrt(9 * DIM))
    sd["encoder.embed.conv.2.bias"] = r(DIM, scale=0.1)
    freq = ((FEATS - 1) // 2 - 1) // 2
    linear("encoder.embed.out.0", sd, DIM, DIM * freq)
    d_k = DIM // HEADS
    for i in range(BLOCKS):
        p = f"encoder.encoders.{i}"
        for name in ("linear_q", "linear_k", "linear_v", "linear_out"):
            linear(f"{p}.self_attn.{name}", sd, DIM, DIM)
        linear(f"{p}.self_attn.linear_pos", sd, DIM, DIM, bias=False)
        sd[f"{p}.self_attn.pos_bias_u"] = r(HEADS, d_k, scale=0.3)
        sd[f"{p}.self_attn.pos_bias_v"] = r(HEADS, d_k, scale=0.3)
        for ff in ("feed_forward", "feed_forward_macaron"):
            linear(f"{p}.{ff}.w_1", sd, FFN, DIM)
            linear(f"{p}.{ff}.w_2", sd, DIM, FFN)
        cm = f"{p}.conv_module"
        sd[cm + ".pointwise_conv1.weight"] = r(2 * DIM, DIM, 1, scale=0.25)
        sd[cm + ".pointwise_conv1.bias"] = r(2 * DIM, scale=0.1)
        # causal: padding 0, the input padded by KERNEL - 1 frames on the left (lorder)
        sd[cm + ".depthwise_conv.weight"] = r(DIM, 1, KERNEL, scale=0.4)
        sd[cm + ".depthwise_conv.bias"] = r(DIM, scale=0.1)
        norm(cm + ".norm", sd)  # LayerNorm: no running statistics
        sd[cm + ".pointwise_conv2.weight"] = r(DIM, DIM, 1, scale=0.25)
        sd[cm + ".pointwise_conv2.bias"] = r(DIM, scale=0.1)
        for n in ("norm_ff", "norm_mha", "norm_ff_macaron", "norm_conv", "norm_final"):
            norm(f"{p}.{n}", sd)
    norm("encoder.after_norm", sd)
    # Seed and scales chosen so that the synthetic audio of the test gives several distinct tokens.
    sd["ctc.ctc_lo.weight"] = r(VOCAB, DIM, scale=0.4)
    sd["ctc.ctc_lo.bias"] = r(VOCAB, scale=0.1)
    sd["decoder.embed.0.weight"] = r(VOCAB, DIM, scale=1.0)
    sd["decoder.output_layer.weight"] = r(VOCAB, DIM, scale=1.0)
    return {k: v.float().contiguous() for k, v in sd.items()}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    save_file(state_dict(), str(out / "wenet_ctc_micro.safetensors"))


if __name__ == "__main__":
    main()
