"""ESPnet's own Conformer encoder (the pinned PyPI `espnet` package, installed without its
dependencies: only espnet.nets.pytorch_backend is imported) with random, seeded weights, as the
reference for the relative-position Conformer: rel_pos ("latest": 2T - 1 positions with
rel_shift), rel_selfattn, macaron feed-forward, convolution module with BatchNorm, Conv2d
subsampling x4, LayerNorm eps 1e-12. Around it, the parts of an ESPnet2 ASR model's state_dict
that the encoder needs: GlobalMVN's `normalize.mean` / `normalize.std` and the CTC projection
`ctc.ctc_lo`, plus decoder and frontend tensors that a loader must skip.

Each utterance is encoded alone (no padding), the ground truth a padded batch must match on its
valid frames.

Writes
  espnet_conformer.weights.safetensors  the ASR-model layout (encoder.*, normalize.*, ctc.*, ...)
  espnet_encoder.weights.safetensors    the bare Encoder's own state_dict (embed.*, encoders.*)
  espnet_conformer.io.safetensors       "input" [B, T, F] padded (garbage beyond lengths),
                                        "lengths" [B], "single_b" [1, T'_b, D], "ctc_b" [1, T'_b, V]

usage: make_espnet_reference.py OUT_DIR
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

# Shared with test_conformer_espnet.cpp.
FEATS, DIM, HEADS, UNITS, BLOCKS, KERNEL, VOCAB = 20, 16, 4, 32, 2, 5, 7
LENGTHS = [41, 23, 15]


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    from espnet.nets.pytorch_backend.conformer.encoder import Encoder

    torch.manual_seed(0)
    encoder = Encoder(
        idim=FEATS,
        attention_dim=DIM,
        attention_heads=HEADS,
        linear_units=UNITS,
        num_blocks=BLOCKS,
        dropout_rate=0.0,
        positional_dropout_rate=0.0,
        attention_dropout_rate=0.0,
        input_layer="conv2d",
        normalize_before=True,
        macaron_style=True,
        pos_enc_layer_type="rel_pos",
        selfattention_layer_type="rel_selfattn",
        activation_type="swish",
        use_cnn_module=True,
        cnn_module_kernel=KERNEL,
    ).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in encoder.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)
            if "norm" in name and name.endswith("weight"):
                p.add_(1.0)  # norms near identity, as trained ones are
        for name, b in encoder.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g, dtype=torch.float64) * 0.2)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g, dtype=torch.float64) + 0.5)
    encoder.eval()

    mean = torch.randn(FEATS, generator=g, dtype=torch.float64)
    std = torch.rand(FEATS, generator=g, dtype=torch.float64) + 0.5
    ctc = torch.nn.Linear(DIM, VOCAB).double()
    with torch.no_grad():
        ctc.weight.copy_(torch.randn(VOCAB, DIM, generator=g, dtype=torch.float64) * 0.3)
        ctc.bias.copy_(torch.randn(VOCAB, generator=g, dtype=torch.float64) * 0.3)

    bare = {k: v.float().contiguous() for k, v in encoder.state_dict().items()}
    model = {"encoder." + k: v for k, v in bare.items()}
    model["normalize.mean"] = mean.float()
    model["normalize.std"] = std.float()
    model["ctc.ctc_lo.weight"] = ctc.weight.detach().float()
    model["ctc.ctc_lo.bias"] = ctc.bias.detach().float()
    model["decoder.embed.0.weight"] = torch.zeros(VOCAB, DIM)  # skipped by the loader
    save_file(model, str(out / "espnet_conformer.weights.safetensors"))
    save_file(bare, str(out / "espnet_encoder.weights.safetensors"))

    # The float32 weights as the C++ side loads them, evaluated in float64.
    with torch.no_grad():
        for name, t in encoder.state_dict().items():
            if t.is_floating_point():
                t.copy_(bare[name].double())
        mean, std = model["normalize.mean"].double(), model["normalize.std"].double()
        ctc.weight.copy_(model["ctc.ctc_lo.weight"].double())
        ctc.bias.copy_(model["ctc.ctc_lo.bias"].double())

    t_max = max(LENGTHS)
    inputs = torch.randn(len(LENGTHS), t_max, FEATS, generator=g, dtype=torch.float64) * 2.0 + 1.0
    io = {"lengths": torch.tensor(LENGTHS, dtype=torch.int64)}
    with torch.no_grad():
        for b, length in enumerate(LENGTHS):
            x = (inputs[b : b + 1, :length] - mean) / std
            ys, _ = encoder(x, torch.ones(1, 1, length, dtype=torch.bool))
            io[f"single_{b}"] = ys.float().contiguous()
            io[f"ctc_{b}"] = torch.log_softmax(ctc(ys), -1).float().contiguous()
    for b, length in enumerate(LENGTHS):
        inputs[b, length:] = 1e3  # garbage in the padding
    io["input"] = inputs.float()
    save_file(io, str(out / "espnet_conformer.io.safetensors"))
    print(f"ESPnet conformer reference: lengths {LENGTHS} -> "
          f"{[io[f'single_{b}'].shape[1] for b in range(len(LENGTHS))]} frames")


if __name__ == "__main__":
    main()
