"""The reference libraries' view of the Conformer configs they define, for
tests/configs/test_conformer_zoo.cpp:
  conformer_torchaudio_base     torchaudio.models.Conformer with the config's sizes
  espnet_conformer_librispeech  ESPnet's Conformer Encoder (the pinned espnet package) with the
                                config's sizes, plus its CTC projection (Linear(512, 5000))
For each: parameters (sum of numel), the sorted parameter shapes, and torch.utils.flop_counter's
count (2 x MACs) for one utterance of FRAMES feature frames. Written to
OUT_DIR/conformer_zoo.json.

usage: make_conformer_zoo_reference.py OUT_DIR
"""
import json
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

FRAMES = 1000  # 10 s at a 10 ms frame shift


def describe(model: torch.nn.Module, *inputs) -> dict:
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(*inputs)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "shapes": sorted(list(p.shape) for p in model.parameters()),
        "flops": counter.get_total_flops(),
        "frames": FRAMES,
    }


class EspnetWithCtc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        from espnet.nets.pytorch_backend.conformer.encoder import Encoder

        self.encoder = Encoder(
            idim=80, attention_dim=512, attention_heads=8, linear_units=2048, num_blocks=12,
            input_layer="conv2d", normalize_before=True, macaron_style=True,
            pos_enc_layer_type="rel_pos", selfattention_layer_type="rel_selfattn",
            activation_type="swish", use_cnn_module=True, cnn_module_kernel=31)
        self.ctc = torch.nn.Linear(512, 5000)

    def forward(self, x):
        ys, _ = self.encoder(x, torch.ones(1, 1, x.size(1), dtype=torch.bool))
        return self.ctc(ys)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    import torchaudio

    torch.manual_seed(0)
    # Plain matmuls for attention, which the flop counter sees on every device.
    torch.backends.mha.set_fastpath_enabled(False)
    zoo = {}
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        audio = torchaudio.models.Conformer(
            input_dim=256, num_heads=4, ffn_dim=1024, num_layers=16,
            depthwise_conv_kernel_size=31, dropout=0.1)
        zoo["conformer_torchaudio_base"] = describe(
            audio, torch.randn(1, FRAMES, 256), torch.tensor([FRAMES]))
        zoo["espnet_conformer_librispeech"] = describe(EspnetWithCtc(), torch.randn(1, FRAMES, 80))
    (out / "conformer_zoo.json").write_text(json.dumps(zoo, indent=1))
    print({k: (v["parameters"], v["flops"]) for k, v in zoo.items()})


if __name__ == "__main__":
    main()
