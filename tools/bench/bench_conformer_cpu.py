"""Conformer encoder latency on the CPU: attnzoo (C++, `attnzoo bench model`) against
torchaudio.models.Conformer (Python eager, the same LibTorch underneath) in the same
configuration, measured side by side in one session (alternating rounds, every timed call kept,
medians compared as ratios, the same thread count).

torchaudio's Conformer is the block stack (no subsampling, no positional encodings), so the
comparison runs our blocks in that configuration: the sizes of conformer_s / conformer_m (kernel
31, odd, as torchaudio requires) on the frames that 10 s and 60 s of audio leave after x4
subsampling (25 per second). Our full encoders (conv2d x4 subsampling, relative positions) are
timed too, for the real-time factor (RTF = time / audio duration).

usage: tools/bench/bench_conformer_cpu.py [--models conformer_s,conformer_m] [--seconds 10,60] [--espnet]
                                    [--dtypes fp32,bf16] [--threads N] [--rounds 5]
                                    [--iterations 5] [--json FILE]
Run from the repository root after tools/setup.sh (uses build/bin/attnzoo and the venv's packages).

With --espnet the whole encoder is also timed against ESPnet's own `Encoder` (the pinned espnet
package, eager PyTorch): conv2d x4 subsampling, rel_pos / rel_selfattn, macaron feed-forward,
convolution module, final LayerNorm, at the model's sizes with kernel 31 (ESPnet needs it odd).
Before timing, the script checks that the two are the same computation: ESPnet's weights, written
in its layout, go through `attnzoo forward` on 3 s of input and the outputs are compared.

--dtypes fp32,bf16 measures each case once per dtype, every runner in it: bf16 is attnzoo's
`--dtype bf16`, and torchaudio's and ESPnet's modules and inputs cast to torch.bfloat16 (the
whole computation in bfloat16, as ours; not autocast, which keeps some ops in float32).
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torchaudio
import yaml
from safetensors.torch import load_file, save_file

from bench_common import alternate, attnzoo_times, python_times

ROOT = Path(__file__).resolve().parents[2]


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def conformer_times(binary, model, overrides, frames, threads, iterations, warmup, dtype):
    extra = ["--frames", str(frames), "--dtype", dtype]
    for o in overrides:
        extra += ["--set", o]
    return attnzoo_times(binary, model, iterations, warmup, threads, extra)


def espnet_encoder(arch, kernel):
    """ESPnet's Conformer encoder at the zoo model's sizes, eval mode, seeded random weights."""
    from espnet.nets.pytorch_backend.conformer.encoder import Encoder

    torch.manual_seed(0)
    encoder = Encoder(idim=arch["input_dim"], attention_dim=arch["encoder_dim"],
                      attention_heads=arch["num_heads"], linear_units=arch["ffn_dim"],
                      num_blocks=arch["num_layers"], dropout_rate=0.0,
                      positional_dropout_rate=0.0, attention_dropout_rate=0.0,
                      input_layer="conv2d", normalize_before=True, macaron_style=True,
                      pos_enc_layer_type="rel_pos", selfattention_layer_type="rel_selfattn",
                      activation_type="swish", use_cnn_module=True, cnn_module_kernel=kernel)
    with torch.no_grad():  # BatchNorm statistics away from the identity
        for name, b in encoder.named_buffers():
            if name.endswith("running_mean"):
                b.normal_(0.0, 0.2)
            elif name.endswith("running_var"):
                b.uniform_(0.5, 1.5)
    return encoder.eval()


def espnet_config(name, arch, kernel, folder):
    """The zoo model's YAML as ESPnet's encoder: kernel, final LayerNorm, eps, layout."""
    config = yaml.safe_load((ROOT / "configs" / "conformer" / f"{name}.yaml").read_text())
    config["architecture"].update({"depthwise_conv_kernel_size": kernel, "final_norm": True,
                                   "norm_eps": 1.0e-12, "global_cmvn": True})
    config["checkpoint"] = {"format": "espnet"}
    path = Path(folder) / f"{name}_espnet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def check_same_computation(binary, encoder, config, folder, frames=300):
    """Max |difference| between ESPnet's encoder and `attnzoo forward` with its weights."""
    folder = Path(folder)
    weights = {"encoder." + k: v.contiguous() for k, v in encoder.state_dict().items()}
    input_dim = yaml.safe_load(Path(config).read_text())["architecture"]["input_dim"]
    features = torch.randn(1, frames, input_dim)
    weights["normalize.mean"] = torch.zeros(features.size(2))
    weights["normalize.std"] = torch.ones(features.size(2))
    save_file(weights, str(folder / "w.safetensors"))
    save_file({"features": features, "lengths": torch.tensor([frames])},
              str(folder / "i.safetensors"))
    subprocess.run([str(binary), "forward", "--model", str(config), "--weights",
                    str(folder / "w.safetensors"), "--input", str(folder / "i.safetensors"),
                    "--output", str(folder / "o.safetensors")], check=True,
                   stdout=subprocess.DEVNULL)
    ours = load_file(str(folder / "o.safetensors"))["encoded"]
    with torch.no_grad():
        theirs, _ = encoder(features, torch.ones(1, 1, frames, dtype=torch.bool))
    return (ours - theirs).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="conformer_s,conformer_m")
    parser.add_argument("--seconds", default="10,60")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--espnet", action="store_true",
                        help="also time the whole encoder against ESPnet's Encoder")
    parser.add_argument("--dtypes", default="fp32",
                        help="comma-separated, of fp32 and bf16: each case is run in each")
    parser.add_argument("--binary", default=str(ROOT / "build" / "bin" / "attnzoo"))
    parser.add_argument("--json")
    args = parser.parse_args()
    args.dtypes = args.dtypes.split(",")
    for dtype in args.dtypes:
        if dtype not in DTYPES:
            parser.error(f"--dtypes: {dtype!r} is not one of {', '.join(DTYPES)}")
    torch.set_num_threads(args.threads)
    results = {"threads": args.threads, "rounds": args.rounds, "iterations": args.iterations,
               "torch": torch.__version__, "torchaudio": torchaudio.__version__, "cases": []}
    print(f"# threads {args.threads}, {args.rounds} rounds x {args.iterations} calls, "
          f"alternating; medians in ms; torch {torch.__version__}, torchaudio "
          f"{torchaudio.__version__}")
    header = (f"{'model':12} {'dtype':5} {'audio':>6} {'frames':>6} {'stack':>9} {'torchaudio':>10} "
              f"{'ratio':>6} {'full enc.':>9} {'full/stack':>10} {'RTF':>7}")
    if args.espnet:
        header += f" {'ours k31':>9} {'ESPnet':>9} {'ratio':>6}"
    print(header)
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            run_model(name, args, results, folder)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def run_model(name, args, results, folder) -> None:
    arch = yaml.safe_load((ROOT / "configs" / "conformer" / f"{name}.yaml").read_text())[
        "architecture"]
    d, heads, ffn, layers = (arch["encoder_dim"], arch["num_heads"], arch["ffn_dim"],
                             arch["num_layers"])
    # torchaudio's layout: blocks only, odd kernel, no positions, no final norm.
    stack = [f"architecture.input_dim={d}", "architecture.subsampling=none",
             "architecture.position=none", "architecture.final_norm=false",
             "architecture.depthwise_conv_kernel_size=31", "features={kind: fbank, "
             f"num_mel_bins: {d}}}"]
    torch.manual_seed(0)
    reference = torchaudio.models.Conformer(input_dim=d, num_heads=heads, ffn_dim=ffn,
                                            num_layers=layers,
                                            depthwise_conv_kernel_size=31).eval()
    espnet, espnet_yaml = None, None
    if args.espnet:
        espnet = espnet_encoder(arch, 31)
        espnet_yaml = espnet_config(name, arch, 31, folder)
        diff = check_same_computation(args.binary, espnet, espnet_yaml, folder)
        print(f"# {name}: ESPnet's weights through attnzoo forward, 3 s: max |diff| {diff:.2e}")
        if diff > 1e-3:
            sys.exit(f"{name}: attnzoo and ESPnet differ by {diff}; not the same computation")
    references = {dtype: copy.deepcopy(reference).to(DTYPES[dtype]) for dtype in args.dtypes}
    espnets = {dtype: None if espnet is None else copy.deepcopy(espnet).to(DTYPES[dtype])
               for dtype in args.dtypes}
    for seconds, dtype in [(int(s), t) for s in args.seconds.split(",") for t in args.dtypes]:
        frames = seconds * 25  # after x4 subsampling of 100 frames per second
        x = torch.randn(1, frames, d).to(DTYPES[dtype])
        lengths = torch.tensor([frames])
        features = torch.randn(1, seconds * 100, arch["input_dim"]).to(DTYPES[dtype])
        mask = torch.ones(1, 1, seconds * 100, dtype=torch.bool)
        ta, esp = references[dtype], espnets[dtype]

        def run_torchaudio():
            with torch.inference_mode():
                ta(x, lengths)

        def run_espnet():
            with torch.inference_mode():
                esp(features, mask)

        runners = {
            "attnzoo": lambda: conformer_times(args.binary, name, stack, frames, args.threads,
                                               args.iterations, args.warmup, dtype),
            "torchaudio": lambda: python_times(run_torchaudio, args.iterations, args.warmup),
            "full": lambda: conformer_times(args.binary, name, [], seconds * 100, args.threads,
                                            args.iterations, args.warmup, dtype),
        }
        if espnet is not None:
            runners["attnzoo_k31"] = lambda: conformer_times(
                args.binary, str(espnet_yaml), [], seconds * 100, args.threads, args.iterations,
                args.warmup, dtype)
            runners["espnet"] = lambda: python_times(run_espnet, args.iterations, args.warmup)
        times = alternate(runners, args.rounds)
        med = {k: statistics.median(v) for k, v in times.items()}
        case = {"model": name, "dtype": dtype, "seconds": seconds, "frames": frames,
                "median_ms": med, "times_ms": times,
                "attnzoo_vs_torchaudio": med["attnzoo"] / med["torchaudio"],
                "full_vs_stack": med["full"] / med["attnzoo"],
                "rtf_full_encoder": med["full"] / (1000.0 * seconds)}
        line = (f"{name:12} {dtype:5} {seconds:5}s {frames:6} {med['attnzoo']:9.1f} "
                f"{med['torchaudio']:10.1f} {case['attnzoo_vs_torchaudio']:6.3f} "
                f"{med['full']:9.1f} {case['full_vs_stack']:10.2f} "
                f"{case['rtf_full_encoder']:7.4f}")
        if espnet is not None:
            case["attnzoo_vs_espnet"] = med["attnzoo_k31"] / med["espnet"]
            line += (f" {med['attnzoo_k31']:9.1f} {med['espnet']:9.1f} "
                     f"{case['attnzoo_vs_espnet']:6.3f}")
        results["cases"].append(case)
        print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
