"""The seed corpus of fuzz_checkpoint: each reference library's own state_dict of the fuzz target's
tiny models, as safetensors, behind the byte that picks the model and the layout
(fuzz_checkpoint.cpp's kCases):

  vit_timm             timm VisionTransformer                      case 0 (timm)
  vit_torchvision      torchvision VisionTransformer               case 1 (torchvision)
  vit_hf               transformers ViTForImageClassification      case 2 (hf), 4.x names
  conformer_torchaudio torchaudio.models.Conformer                 case 4 (torchaudio)
  conformer_wenet      WeNet's names (tests/models/make_wenet_reference.py)   case 7 (wenet)
  conformer_espnet     ESPnet's Conformer Encoder with GlobalMVN and CTC      case 8 (espnet)
  ast_hf               transformers ASTForAudioClassification      case 10 (hf)

Random weights, seeded. Run once with the venv's Python when the tiny models change; the output is
committed.
usage: make_checkpoint_seeds.py OUT_DIR
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "models"))


def seed(out: Path, name: str, case: int, state: dict) -> None:
    tensors = {k: v.detach().float().contiguous() if v.is_floating_point() else v.contiguous()
               for k, v in state.items()}
    (out / name).write_bytes(bytes([case]) + save(tensors))


def vit(out: Path) -> None:
    import timm
    import torchvision
    from transformers import ViTConfig, ViTForImageClassification
    from make_vit_reference import hf_v4_name

    seed(out, "vit_timm", 0, timm.models.vision_transformer.VisionTransformer(
        img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2, mlp_ratio=2.0,
        num_classes=3).state_dict())
    seed(out, "vit_torchvision", 1, torchvision.models.VisionTransformer(
        image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=3).state_dict())
    hf = ViTForImageClassification(ViTConfig(
        image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_labels=3))
    seed(out, "vit_hf", 2, {hf_v4_name(k): v for k, v in hf.state_dict().items()})


def espnet_state_dict(num_blocks: int) -> dict:
    """ESPnet's Conformer Encoder (conv2d subsampling, rel_pos, macaron, kernel 5) with GlobalMVN's
    and a CTC head's names, as an ESPnet ASR model's state dict has them."""
    from espnet.nets.pytorch_backend.conformer.encoder import Encoder
    encoder = Encoder(idim=20, attention_dim=16, attention_heads=4, linear_units=32,
                      num_blocks=num_blocks, input_layer="conv2d", normalize_before=True,
                      macaron_style=True, pos_enc_layer_type="rel_pos",
                      selfattention_layer_type="rel_selfattn", activation_type="swish",
                      use_cnn_module=True, cnn_module_kernel=5)
    state = {f"encoder.{k}": v for k, v in encoder.state_dict().items()}
    state["normalize.mean"] = torch.zeros(20)
    state["normalize.std"] = torch.ones(20)
    state["ctc.ctc_lo.weight"] = torch.randn(7, 16)
    state["ctc.ctc_lo.bias"] = torch.randn(7)
    return state


def conformer(out: Path) -> None:
    import torchaudio
    from make_wenet_reference import synthetic_state_dict

    seed(out, "conformer_torchaudio", 4, torchaudio.models.Conformer(
        input_dim=16, num_heads=2, ffn_dim=32, num_layers=1, depthwise_conv_kernel_size=3,
        dropout=0.0).state_dict())
    seed(out, "conformer_wenet", 7, synthetic_state_dict())
    seed(out, "conformer_espnet", 8, espnet_state_dict(num_blocks=2))


def ast(out: Path) -> None:
    from transformers import ASTConfig, ASTForAudioClassification

    model = ASTForAudioClassification(ASTConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        patch_size=8, frequency_stride=8, time_stride=8, max_length=32, num_mel_bins=16,
        num_labels=3))
    seed(out, "ast_hf", 10, model.state_dict())


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    vit(out)
    conformer(out)
    ast(out)


if __name__ == "__main__":
    main()
