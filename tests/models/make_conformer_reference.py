"""Reference Conformers from torchaudio with random weights (seeded), for
tests/models/test_conformer.cpp.

For each case (convolution_first x use_group_norm) writes CASE.weights.safetensors (torchaudio's
state_dict, BatchNorm running statistics included) and CASE.io.safetensors:
  "input"     [B, T, D]  the padded batch; frames beyond each length hold random values
  "lengths"   [B]
  "batched"   [B, T, D]  torchaudio on the padded batch (padding leaks into valid frames)
  "single_b"  [1, L_b, D] torchaudio on utterance b alone, unpadded (the ground truth)

Also writes make_wenet_reference.py's files (WeNet layout, our float64 reference).

usage: make_conformer_reference.py OUT_DIR
"""
import sys
from pathlib import Path

import torch
import torchaudio
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from state_dict import save_state_dict  # noqa: E402

# Shared with test_conformer.cpp.
DIM, HEADS, FFN, LAYERS, KERNEL = 24, 4, 40, 2, 7
LENGTHS = [11, 7, 3]


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for convolution_first in (False, True):
        for group_norm in (False, True):
            name = f"torchaudio_conformer_cf{int(convolution_first)}_gn{int(group_norm)}"
            model = torchaudio.models.Conformer(
                input_dim=DIM, num_heads=HEADS, ffn_dim=FFN, num_layers=LAYERS,
                depthwise_conv_kernel_size=KERNEL, dropout=0.0, use_group_norm=group_norm,
                convolution_first=convolution_first)
            model.eval()
            with torch.no_grad():
                # Perturb everything (norms start at 1/0, BatchNorm statistics at 0/1) so that a
                # swapped or ignored tensor shows in the outputs.
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.1)
                for buf_name, buf in model.named_buffers():
                    if buf_name.endswith("running_mean"):
                        buf.copy_(torch.randn_like(buf) * 0.2)
                    elif buf_name.endswith("running_var"):
                        buf.copy_(torch.rand_like(buf) + 0.5)
                    elif buf_name.endswith("num_batches_tracked"):
                        buf.fill_(7)
                lengths = torch.tensor(LENGTHS)
                x = torch.randn(len(LENGTHS), max(LENGTHS), DIM)
                batched, out_lengths = model(x, lengths)
                assert torch.equal(out_lengths, lengths)
                io = {"input": x, "lengths": lengths, "batched": batched.contiguous()}
                for b, length in enumerate(LENGTHS):
                    single, _ = model(x[b:b + 1, :length].contiguous(), lengths[b:b + 1])
                    io[f"single_{b}"] = single.contiguous()
            save_state_dict(model, out / f"{name}.weights.safetensors",
                            metadata={"source": "torchaudio"})
            save_file(io, str(out / f"{name}.io.safetensors"))
    # The WeNet-layout checkpoint and our float64 reference encoder (same fixture).
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import make_wenet_reference  # noqa: E402
    make_wenet_reference.main()


if __name__ == "__main__":
    main()
