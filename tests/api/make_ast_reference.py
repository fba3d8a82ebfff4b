"""Reference Audio Spectrogram Transformer (Hugging Face transformers) with random weights (seeded),
for the AST parity tests.

Writes, into OUT_DIR:
  ast.weights.safetensors          ASTForAudioClassification's state_dict (transformers >= 5 names)
                                   of a small random model; the config is in the metadata.
  ast.io.safetensors               "features" [2, 64, 32] (the model input, [batch, time, mel]),
                                   "hidden" [2, 12, 48] (ASTModel's last_hidden_state, after the
                                   final layernorm) and "logits" [2, 5].
  ast_features.io.safetensors      ASTFeatureExtractor's output for a 1.3 s 16 kHz "waveform"
                                   [20800]: "features" [1024, 128] (normalised) and
                                   "features_unnormalized" [1024, 128]; the extractor's settings
                                   (and the torchaudio fbank arguments) are in the metadata.

Runs offline: nothing is downloaded.

usage: make_ast_reference.py OUT_DIR
"""
import inspect
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import ASTConfig, ASTFeatureExtractor, ASTForAudioClassification

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from state_dict import save_state_dict  # noqa: E402

SAMPLE_RATE = 16000


def small_config() -> ASTConfig:
    # Grid: (32 - 16) // 10 + 1 = 2 frequency patches by (64 - 16) // 10 + 1 = 5 time patches.
    return ASTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=96, patch_size=16, frequency_stride=10, time_stride=10,
                     max_length=64, num_mel_bins=32, num_labels=5)


def perturb(model: torch.nn.Module) -> None:
    """transformers' init leaves LayerNorms at 1/0 and the tokens and position embeddings at 0;
    add noise so that a swapped or ignored tensor shows in the outputs."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("layernorm" in name or name.endswith(("cls_token", "distillation_token",
                                                       "position_embeddings"))):
                p.add_(torch.randn_like(p) * 0.1)


def config_metadata(config: ASTConfig) -> dict[str, str]:
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "hidden_act", "layer_norm_eps", "patch_size", "qkv_bias", "frequency_stride",
            "time_stride", "max_length", "num_mel_bins", "num_labels")
    return {"source": "transformers ASTForAudioClassification",
            **{k: str(getattr(config, k)) for k in keys}}


def model_reference(out: Path) -> None:
    config = small_config()
    model = ASTForAudioClassification(config)
    model.eval()
    perturb(model)
    features = torch.randn(2, config.max_length, config.num_mel_bins)
    with torch.no_grad():
        hidden = model.audio_spectrogram_transformer(input_values=features).last_hidden_state
        logits = model(input_values=features).logits
    save_state_dict(model, out / "ast.weights.safetensors", metadata=config_metadata(config))
    save_file({"features": features, "hidden": hidden.contiguous(), "logits": logits.contiguous()},
              str(out / "ast.io.safetensors"))


def test_waveform() -> torch.Tensor:
    """1.3 s at 16 kHz: two sines and seeded noise, peak below 0.5."""
    t = torch.arange(int(1.3 * SAMPLE_RATE), dtype=torch.float64) / SAMPLE_RATE
    wave = 0.2 * torch.sin(2 * math.pi * 440.0 * t) + 0.1 * torch.sin(2 * math.pi * 1234.5 * t)
    generator = torch.Generator().manual_seed(1)
    wave = wave + 0.02 * torch.randn(t.shape, generator=generator, dtype=torch.float64)
    return wave.to(torch.float32)


def fbank_arguments(extractor: ASTFeatureExtractor) -> dict[str, object]:
    """Every argument torchaudio.compliance.kaldi.fbank sees in ASTFeatureExtractor: the three it
    passes (sample_frequency, window_type, num_mel_bins) over fbank's own defaults."""
    import torchaudio.compliance.kaldi as kaldi

    arguments = {name: p.default for name, p in inspect.signature(kaldi.fbank).parameters.items()
                 if p.default is not inspect.Parameter.empty}
    arguments.update(sample_frequency=extractor.sampling_rate, window_type="hanning",
                     num_mel_bins=extractor.num_mel_bins)
    return arguments


def extractor_metadata(extractor: ASTFeatureExtractor) -> dict[str, str]:
    return {"source": "transformers ASTFeatureExtractor",
            "sampling_rate": str(extractor.sampling_rate), "mean": repr(extractor.mean),
            "std": repr(extractor.std), "max_length": str(extractor.max_length),
            "num_mel_bins": str(extractor.num_mel_bins),
            "padding_value": "0.0", "waveform_scale": "1.0",
            "normalize": "(fbank - mean) / (2 * std), after zero-padding/truncating to max_length",
            **{f"fbank.{k}": str(v) for k, v in fbank_arguments(extractor).items()}}


def feature_reference(out: Path) -> None:
    waveform = test_waveform()
    settings = dict(num_mel_bins=128, max_length=1024, sampling_rate=SAMPLE_RATE)
    extractor = ASTFeatureExtractor(**settings, do_normalize=True)
    plain = ASTFeatureExtractor(**settings, do_normalize=False)
    features = extractor(waveform.numpy(), sampling_rate=SAMPLE_RATE,
                         return_tensors="pt").input_values[0]
    unnormalized = plain(waveform.numpy(), sampling_rate=SAMPLE_RATE,
                         return_tensors="pt").input_values[0]
    save_file({"waveform": waveform,
               "features": features.to(torch.float32).contiguous(),
               "features_unnormalized": unnormalized.to(torch.float32).contiguous()},
              str(out / "ast_features.io.safetensors"), metadata=extractor_metadata(extractor))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model_reference(out)
    feature_reference(out)


if __name__ == "__main__":
    main()
