"""A WeNet-layout Conformer encoder checkpoint (synthetic, random weights, seeded) and the output of
OUR float64 reference encoder written from WeNet's equations, for tests/models/test_conformer.cpp.

The `wenet` package is not installed (it is not on PyPI in a usable form), so this is NOT WeNet's
code: it is our transcription of WeNet's ConformerEncoder (wenet/transformer/encoder.py,
encoder_layer.py, attention.py RelPositionMultiHeadedAttention, convolution.py,
subsampling.py Conv2dSubsampling4, embedding.py RelPositionalEncoding, cmvn.py GlobalCMVN) with
normalize_before=True, macaron, rel_pos, conv2d subsampling x4, BatchNorm, no causal conv, and the
tensor names and shapes of WeNet's state_dict (encoder.*, ctc.ctc_lo.*); and U2++'s variant, a
causal convolution with LayerNorm. Both were checked once against WeNet's own model code run
locally (ConformerEncoder with these options, to 2e-6 in float32); that code is not a dependency.

Each utterance is encoded alone (no padding), which is the ground truth the padded batch must
match on its valid frames.

Writes wenet_conformer{,_causal}.weights.safetensors and wenet_conformer{,_causal}.io.safetensors:
  "input" [B, T, F] padded (garbage beyond lengths), "lengths" [B],
  "single_b" [1, T'_b, D] encoder output, "ctc_b" [1, T'_b, V] CTC log-probabilities.

usage: make_wenet_reference.py OUT_DIR
"""
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

# Shared with test_conformer.cpp (WenetLayout tests).
FEATS, DIM, HEADS, UNITS, BLOCKS, KERNEL, VOCAB = 20, 16, 4, 32, 2, 5, 7
LENGTHS = [40, 23, 16]
EPS = 1e-5  # WeNet's LayerNorm and BatchNorm eps


class RandomTensors:
    """Seeded random tensors of the checkpoint's kinds: normal draws, uniform draws, LayerNorm
    (or BatchNorm) affine pairs near 1 and 0, and linear layers scaled by their fan-in."""

    def __init__(self, seed, dtype):
        self.g = torch.Generator().manual_seed(seed)
        self.dtype = dtype

    def normal(self, *shape, scale=0.3):
        return torch.randn(*shape, generator=self.g, dtype=self.dtype) * scale

    def uniform(self, *shape):
        return torch.rand(*shape, generator=self.g, dtype=self.dtype)

    def norm(self, prefix, sd):
        sd[prefix + ".weight"] = 1.0 + self.normal(DIM, scale=0.1)
        sd[prefix + ".bias"] = self.normal(DIM, scale=0.1)

    def linear(self, prefix, sd, out_dim, in_dim, bias=True):
        sd[prefix + ".weight"] = self.normal(out_dim, in_dim, scale=1.0 / math.sqrt(in_dim))
        if bias:
            sd[prefix + ".bias"] = self.normal(out_dim, scale=0.1)


def encoder_tensors(sd, t, batch_norm=True):
    """The encoder after its CMVN, under WeNet's names: Conv2d x4 subsampling, the blocks (the
    convolution module's norm a BatchNorm with running statistics, or a LayerNorm) and
    after_norm, drawn from `t` (RandomTensors)."""
    sd["encoder.embed.conv.0.weight"] = t.normal(DIM, 1, 3, 3, scale=0.3)
    sd["encoder.embed.conv.0.bias"] = t.normal(DIM, scale=0.1)
    sd["encoder.embed.conv.2.weight"] = t.normal(DIM, DIM, 3, 3, scale=1.0 / math.sqrt(9 * DIM))
    sd["encoder.embed.conv.2.bias"] = t.normal(DIM, scale=0.1)
    freq = ((FEATS - 1) // 2 - 1) // 2
    t.linear("encoder.embed.out.0", sd, DIM, DIM * freq)
    d_k = DIM // HEADS
    for i in range(BLOCKS):
        p = f"encoder.encoders.{i}"
        for name in ("linear_q", "linear_k", "linear_v", "linear_out"):
            t.linear(f"{p}.self_attn.{name}", sd, DIM, DIM)
        t.linear(f"{p}.self_attn.linear_pos", sd, DIM, DIM, bias=False)
        sd[f"{p}.self_attn.pos_bias_u"] = t.normal(HEADS, d_k)
        sd[f"{p}.self_attn.pos_bias_v"] = t.normal(HEADS, d_k)
        for ff in ("feed_forward", "feed_forward_macaron"):
            t.linear(f"{p}.{ff}.w_1", sd, UNITS, DIM)
            t.linear(f"{p}.{ff}.w_2", sd, DIM, UNITS)
        sd[f"{p}.conv_module.pointwise_conv1.weight"] = t.normal(2 * DIM, DIM, 1, scale=0.25)
        sd[f"{p}.conv_module.pointwise_conv1.bias"] = t.normal(2 * DIM, scale=0.1)
        sd[f"{p}.conv_module.depthwise_conv.weight"] = t.normal(DIM, 1, KERNEL, scale=0.4)
        sd[f"{p}.conv_module.depthwise_conv.bias"] = t.normal(DIM, scale=0.1)
        t.norm(f"{p}.conv_module.norm", sd)
        if batch_norm:
            sd[f"{p}.conv_module.norm.running_mean"] = t.normal(DIM, scale=0.2)
            sd[f"{p}.conv_module.norm.running_var"] = t.uniform(DIM) + 0.5
            sd[f"{p}.conv_module.norm.num_batches_tracked"] = torch.tensor(7)
        sd[f"{p}.conv_module.pointwise_conv2.weight"] = t.normal(DIM, DIM, 1, scale=0.25)
        sd[f"{p}.conv_module.pointwise_conv2.bias"] = t.normal(DIM, scale=0.1)
        for n in ("norm_ff", "norm_mha", "norm_ff_macaron", "norm_conv", "norm_final"):
            t.norm(f"{p}.{n}", sd)
    t.norm("encoder.after_norm", sd)


def synthetic_state_dict(causal=False) -> dict:
    t = RandomTensors(2 if causal else 0, torch.float64)
    sd = {}
    sd["encoder.global_cmvn.mean"] = t.normal(FEATS, scale=1.0)
    sd["encoder.global_cmvn.istd"] = t.uniform(FEATS) + 0.5
    encoder_tensors(sd, t, batch_norm=not causal)
    t.linear("ctc.ctc_lo", sd, VOCAB, DIM)
    # A full WeNet checkpoint also carries the attention decoder; the mapping ignores it.
    sd["decoder.embed.0.weight"] = t.normal(VOCAB, DIM)
    return sd


def layer_norm(x, sd, prefix):
    return F.layer_norm(x, (DIM,), sd[prefix + ".weight"], sd[prefix + ".bias"], EPS)


def lin(x, sd, prefix):
    return F.linear(x, sd[prefix + ".weight"], sd.get(prefix + ".bias"))


def encode(x, sd, causal=False):
    """x: [1, T, F] one utterance, float64 -> ([1, T', D], ctc log-probs [1, T', V]). causal:
    U2++'s convolution module (cnn_module_norm="layer_norm", causal=True)."""
    # GlobalCMVN (norm_var=True)
    x = (x - sd["encoder.global_cmvn.mean"]) * sd["encoder.global_cmvn.istd"]
    # Conv2dSubsampling4
    x = x.unsqueeze(1)
    x = F.relu(F.conv2d(x, sd["encoder.embed.conv.0.weight"], sd["encoder.embed.conv.0.bias"], 2))
    x = F.relu(F.conv2d(x, sd["encoder.embed.conv.2.weight"], sd["encoder.embed.conv.2.bias"], 2))
    b, c, t, f = x.shape
    x = lin(x.transpose(1, 2).reshape(b, t, c * f), sd, "encoder.embed.out.0")
    # RelPositionalEncoding: x * sqrt(d); pe rows 0..T'-1, sin at even, cos at odd features
    x = x * math.sqrt(DIM)
    position = torch.arange(t, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, DIM, 2, dtype=torch.float64) * -(math.log(10000.0) / DIM))
    pos_emb = torch.zeros(1, t, DIM, dtype=torch.float64)
    pos_emb[0, :, 0::2] = torch.sin(position * div_term)
    pos_emb[0, :, 1::2] = torch.cos(position * div_term)
    d_k = DIM // HEADS
    for i in range(BLOCKS):
        p = f"encoder.encoders.{i}"
        # macaron feed-forward, half step
        y = layer_norm(x, sd, f"{p}.norm_ff_macaron")
        y = lin(F.silu(lin(y, sd, f"{p}.feed_forward_macaron.w_1")), sd,
                f"{p}.feed_forward_macaron.w_2")
        x = x + 0.5 * y
        # RelPositionMultiHeadedAttention (no rel_shift)
        y = layer_norm(x, sd, f"{p}.norm_mha")
        q = lin(y, sd, f"{p}.self_attn.linear_q").view(1, t, HEADS, d_k)
        k = lin(y, sd, f"{p}.self_attn.linear_k").view(1, t, HEADS, d_k).transpose(1, 2)
        v = lin(y, sd, f"{p}.self_attn.linear_v").view(1, t, HEADS, d_k).transpose(1, 2)
        pp = lin(pos_emb, sd, f"{p}.self_attn.linear_pos").view(1, t, HEADS, d_k).transpose(1, 2)
        q_u = (q + sd[f"{p}.self_attn.pos_bias_u"]).transpose(1, 2)
        q_v = (q + sd[f"{p}.self_attn.pos_bias_v"]).transpose(1, 2)
        scores = (q_u @ k.transpose(-2, -1) + q_v @ pp.transpose(-2, -1)) / math.sqrt(d_k)
        att = torch.softmax(scores, -1) @ v  # [1, H, T, d_k]
        x = x + lin(att.transpose(1, 2).reshape(1, t, DIM), sd, f"{p}.self_attn.linear_out")
        # ConvolutionModule (norm_conv is the encoder layer's, outside the module)
        y = layer_norm(x, sd, f"{p}.norm_conv").transpose(1, 2)  # [1, D, T]
        cm = f"{p}.conv_module"
        if causal:
            # WeNet pads the module's input, before pointwise_conv1: the depthwise kernel then
            # sees the GLU of that convolution's bias left of the first frame, not zeros.
            y = F.pad(y, (KERNEL - 1, 0))
        y = F.glu(F.conv1d(y, sd[cm + ".pointwise_conv1.weight"], sd[cm + ".pointwise_conv1.bias"]),
                  dim=1)
        y = F.conv1d(y, sd[cm + ".depthwise_conv.weight"], sd[cm + ".depthwise_conv.bias"],
                     padding=0 if causal else (KERNEL - 1) // 2, groups=DIM)
        if causal:
            y = F.layer_norm(y.transpose(1, 2), (DIM,), sd[cm + ".norm.weight"],
                             sd[cm + ".norm.bias"], EPS).transpose(1, 2)
        else:
            y = F.batch_norm(y, sd[cm + ".norm.running_mean"], sd[cm + ".norm.running_var"],
                             sd[cm + ".norm.weight"], sd[cm + ".norm.bias"], False, 0.0, EPS)
        y = F.conv1d(F.silu(y), sd[cm + ".pointwise_conv2.weight"], sd[cm + ".pointwise_conv2.bias"])
        x = x + y.transpose(1, 2)
        # feed-forward, half step, then norm_final
        y = layer_norm(x, sd, f"{p}.norm_ff")
        y = lin(F.silu(lin(y, sd, f"{p}.feed_forward.w_1")), sd, f"{p}.feed_forward.w_2")
        x = layer_norm(x + 0.5 * y, sd, f"{p}.norm_final")
    x = layer_norm(x, sd, "encoder.after_norm")
    return x, torch.log_softmax(lin(x, sd, "ctc.ctc_lo"), -1)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for causal, name in ((False, "wenet_conformer"), (True, "wenet_conformer_causal")):
        write(out, name, causal)


def write(out, name, causal):
    sd = synthetic_state_dict(causal)
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor(LENGTHS)
    x = torch.randn(len(LENGTHS), max(LENGTHS) + 2, FEATS, generator=g, dtype=torch.float64)
    for b, length in enumerate(LENGTHS):
        x[b, length:] = 100.0 * torch.randn(x.shape[1] - length, FEATS, generator=g,
                                            dtype=torch.float64)
    io = {"input": x.float(), "lengths": lengths}
    for b, length in enumerate(LENGTHS):
        encoded, ctc = encode(x[b:b + 1, :length], sd, causal)
        io[f"single_{b}"] = encoded.float().contiguous()
        io[f"ctc_{b}"] = ctc.float().contiguous()
    save_file({k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in sd.items()},
              str(out / f"{name}.weights.safetensors"), metadata={"source": "synthetic wenet"})
    save_file(io, str(out / f"{name}.io.safetensors"))


if __name__ == "__main__":
    main()
