"""Reference files for tests/cli/conformer_test.sh: the reference libraries' own Conformers,
built with the sizes of tests/configs/data/conformer_micro_*.yaml, random weights (seeded), and
their outputs for each utterance encoded alone (the ground truth on valid frames).

Writes into OUT_DIR:
  torchaudio/  weights.safetensors (torchaudio.models.Conformer's state_dict),
               input.safetensors ("features" [3, T, 16], "lengths" [3]),
               expected.safetensors ("single_b" [1, L_b, 16] per utterance)
  espnet/      weights.safetensors (an ESPnet2 ASR model's encoder.*, normalize.*, ctc.*),
               input.safetensors ("features" [3, T, 20], "lengths" [3]),
               expected.safetensors ("single_b" [1, T'_b, 16], "ctc_b" [1, T'_b, 7])
  bad/         inputs `attnzoo forward` must refuse

usage: make_conformer_reference.py OUT_DIR
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

LENGTHS = [37, 29, 12]


def perturb(model: torch.nn.Module, generator: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.1)
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=generator) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=generator) + 0.5)


def torchaudio_case(out: Path, g: torch.Generator) -> None:
    import torchaudio

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torchaudio.models.Conformer(input_dim=16, num_heads=4, ffn_dim=24, num_layers=2,
                                       depthwise_conv_kernel_size=5).eval()
    perturb(model, g)
    features = torch.randn(len(LENGTHS), max(LENGTHS), 16, generator=g)
    expected = {}
    with torch.no_grad():
        for b, length in enumerate(LENGTHS):
            y, _ = model(features[b : b + 1, :length], torch.tensor([length]))
            expected[f"single_{b}"] = y.contiguous()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(out / "weights.safetensors"))
    save_file({"features": features, "lengths": torch.tensor(LENGTHS)},
              str(out / "input.safetensors"))
    save_file(expected, str(out / "expected.safetensors"))


def espnet_case(out: Path, g: torch.Generator) -> None:
    from espnet.nets.pytorch_backend.conformer.encoder import Encoder

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    encoder = Encoder(idim=20, attention_dim=16, attention_heads=4, linear_units=32, num_blocks=2,
                      dropout_rate=0.0, positional_dropout_rate=0.0, input_layer="conv2d",
                      macaron_style=True, pos_enc_layer_type="rel_pos",
                      selfattention_layer_type="rel_selfattn", use_cnn_module=True,
                      cnn_module_kernel=5).eval()
    perturb(encoder, g)
    ctc = torch.nn.Linear(16, 7)
    perturb(ctc, g)
    mean = torch.randn(20, generator=g)
    std = torch.rand(20, generator=g) + 0.5
    features = torch.randn(len(LENGTHS), max(LENGTHS), 20, generator=g) * 2.0 + 1.0
    expected = {}
    with torch.no_grad():
        for b, length in enumerate(LENGTHS):
            x = (features[b : b + 1, :length] - mean) / std
            ys, _ = encoder(x, torch.ones(1, 1, length, dtype=torch.bool))
            expected[f"single_{b}"] = ys.contiguous()
            expected[f"ctc_{b}"] = torch.log_softmax(ctc(ys), -1).contiguous()
    weights = {"encoder." + k: v.contiguous() for k, v in encoder.state_dict().items()}
    weights.update({"normalize.mean": mean, "normalize.std": std,
                    "ctc.ctc_lo.weight": ctc.weight.detach(), "ctc.ctc_lo.bias": ctc.bias.detach()})
    save_file(weights, str(out / "weights.safetensors"))
    save_file({"features": features, "lengths": torch.tensor(LENGTHS)},
              str(out / "input.safetensors"))
    save_file(expected, str(out / "expected.safetensors"))


def bad_inputs(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    save_file({"features": torch.randn(2, 6, 20)}, str(out / "short.safetensors"))
    save_file({"features": torch.randn(2, 30, 19)}, str(out / "width.safetensors"))
    save_file({"features": torch.randn(2, 30, 20), "lengths": torch.tensor([30.0, 20.0])},
              str(out / "float_lengths.safetensors"))
    save_file({"features": torch.randn(2, 30, 20), "lengths": torch.tensor([31, 20])},
              str(out / "long_lengths.safetensors"))
    save_file({"features": torch.randn(2, 30, 20), "lengths": torch.tensor([30, 20])},
              str(out / "unequal.safetensors"))
    save_file({"features": torch.randn(2, 83, 20)}, str(out / "stream.safetensors"))
    (out / "pixels").mkdir(exist_ok=True)
    save_file({"pixels": torch.randn(1, 3, 224, 224)}, str(out / "pixels" / "input.safetensors"))


def main() -> None:
    out = Path(sys.argv[1])
    g = torch.Generator().manual_seed(3)
    torchaudio_case(out / "torchaudio", g)
    espnet_case(out / "espnet", g)
    bad_inputs(out / "bad")
    print(f"Conformer CLI references in {out}")


if __name__ == "__main__":
    main()
