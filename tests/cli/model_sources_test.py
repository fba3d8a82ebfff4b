"""model_sources_test.py CASE ATTNZOO_BINARY OUT_DIR: a model folder (or checkpoint) written by its
source library's own save function runs through `attnzoo` as it is, with the library's numbers:

  hf_vit          ViTForImageClassification.save_pretrained (model.safetensors) and
                  ViTImageProcessor.save_pretrained
  hf_vit_bin      the same weights as pytorch_model.bin (torch.save of the state dict: what
                  transformers 4 wrote; transformers 5 writes safetensors only)
  hf_vit_sharded  save_pretrained(max_shard_size=...): model.safetensors.index.json and shards
  hf_deit         DeiTForImageClassificationWithTeacher and DeiTImageProcessor (resize, crop)
  hf_ast          ASTForAudioClassification and ASTFeatureExtractor
  timm_vit        timm.models.save_for_hf of vit_small_patch16_224 (pytorch_model.bin)
  timm_reg        save_for_hf of vit_base_patch16_reg4_gap_256 (register tokens, no class token,
                  average pooling), as model.safetensors
  timm_deit       save_for_hf of deit_tiny_distilled_patch16_224 (two heads, averaged)
  timm_training   a timm training checkpoint (.pth: epoch, state_dict, optimizer, args,
                  state_dict_ema, metric) for vit_small_patch16_224, each state dict by --key
  torchvision     torchvision's vit_b_32, its state dict saved with torch.save, with its weights'
                  eval transforms
  convert         `attnzoo convert`: a training checkpoint's EMA state dict (tied weights, a
                  transposed view, bf16) and a sharded Hugging Face folder as safetensors, read
                  back by the `safetensors` package, equal to what torch saved

Random weights, seeded, with the classifier scaled so that the probabilities depend on the input.
For each case:
  1. `attnzoo forward --model DIR` on random inputs: logits within 1e-4 of the library's forward;
  2. `attnzoo classify --model DIR --json` on real photos (opencv-doc) or speech (espeak-ng):
     every class's probability within 1e-3 of the library's own processor and model;
  3. `attnzoo models --describe DIR`, saved into a zoo folder, classifies the same by its name;
  4. (hf_vit) `attnzoo serve` with a serve config naming the folder: the file route's
     probabilities against the library's.
"""
import http.client
import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file, save_file

LOGITS_TOLERANCE = 1e-4
PROBABILITY_TOLERANCE = 1e-3
REPO = Path(__file__).resolve().parents[2]
PHOTOS = [Path("/usr/share/doc/opencv-doc/examples/data") / name
          for name in ("baboon.jpg", "fruits.jpg", "HappyFish.jpg")]
HEAD_SCALE = 25.0  # random heads give near-uniform probabilities; scaled, they follow the input


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def attnzoo(binary: str, *args: str) -> str:
    result = subprocess.run([binary, *args], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"attnzoo {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result.stdout


def scale_head(*linears: torch.nn.Module, scale: float = HEAD_SCALE) -> None:
    with torch.no_grad():
        for linear in linears:
            linear.weight.mul_(scale)


def compare_forward(binary: str, folder: Path, work: Path, inputs: torch.Tensor, name: str,
                    reference: torch.Tensor, output: str = "logits") -> None:
    save_file({name: inputs.contiguous()}, str(work / "input.safetensors"))
    attnzoo(binary, "forward", "--model", str(folder), "--input", str(work / "input.safetensors"),
            "--output", str(work / "output.safetensors"))
    ours = load_file(str(work / "output.safetensors"))[output]
    error = (ours.double() - reference.double()).abs().max().item()
    spread = reference.std().item()
    print(f"forward: logits {list(ours.shape)} max |diff| {error:.2e} (their std {spread:.2f})")
    if error > LOGITS_TOLERANCE:
        fail(f"logits differ by {error:.3e} > {LOGITS_TOLERANCE}")
    if spread < 1.0:
        fail(f"the reference logits hardly vary (std {spread:.3f}): the test would not see a change")


def compare_classify(binary: str, model: str, inputs, reference: dict, zoo=None, extra=()) -> None:
    """`attnzoo classify --json` against the library's probabilities, per input file."""
    classes = len(next(iter(reference.values())))
    args = (["--zoo", str(zoo)] if zoo else []) + ["classify", "--model", model, "--json",
                                                   "--topk", str(classes), *extra,
                                                   *[str(p) for p in inputs]]
    lines = [json.loads(line) for line in attnzoo(binary, *args).splitlines() if line.strip()]
    if len(lines) != len(inputs):
        fail(f"classify printed {len(lines)} results for {len(inputs)} inputs")
    worst = 0.0
    for line, path in zip(lines, inputs):
        if "error" in line:
            fail(f"{path}: {line['error']}")
        ours = np.zeros(classes)
        for p in line["top"]:
            ours[p["index"]] = p["prob"]
        theirs = reference[str(path)]
        worst = max(worst, float(np.abs(ours - theirs).max()))
        if int(np.argmax(ours)) != int(np.argmax(theirs)):
            fail(f"{path}: top class {int(np.argmax(ours))}, the library's {int(np.argmax(theirs))}")
    top = [float(np.max(v)) for v in reference.values()]
    print(f"classify{' (described, from the zoo)' if zoo else ''}: {len(inputs)} inputs, "
          f"max |probability diff| {worst:.2e}; the library's top probabilities "
          f"{', '.join(f'{t:.3f}' for t in top)}")
    if worst > PROBABILITY_TOLERANCE:
        fail(f"probabilities differ by {worst:.3e} > {PROBABILITY_TOLERANCE}")
    # The inputs must get different answers, or a model that ignored them would pass.
    vectors = list(reference.values())
    spread = max(float(np.abs(a - b).max()) for a in vectors for b in vectors)
    if spread < 0.05:
        fail(f"the library's probabilities hardly differ between inputs ({spread:.3f}): the "
             "head does not follow the input")


def check_described(binary: str, folder: Path, work: Path, inputs, reference: dict,
                    expect: dict) -> None:
    """The described YAML states what the source config says, and runs the same from a zoo."""
    text = attnzoo(binary, "models", "--describe", str(folder))
    document = yaml.safe_load(text)
    for path, value in expect.items():
        got = document
        for key in path.split("."):
            got = got[key]
        if got != value:
            fail(f"describe: {path} is {got!r}, expected {value!r}:\n{text}")
    zoo = work / "zoo"
    zoo.mkdir(exist_ok=True)
    document["name"] = "described_" + document["name"].replace("-", "_")
    (zoo / "described.yaml").write_text(yaml.safe_dump(document))
    compare_classify(binary, document["name"], inputs, reference, zoo=zoo)


# --- Hugging Face -------------------------------------------------------------------------------

def hf_image_reference(model, processor) -> dict:
    out = {}
    for path in PHOTOS:
        with Image.open(path) as image:
            pixels = processor(images=image.convert("RGB"), return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            out[str(path)] = torch.softmax(model(pixel_values=pixels).logits.double(), -1)[0].numpy()
    return out


def check_hf_image_folder(binary: str, work: Path, folder: Path, model, processor,
                          expect: dict) -> dict:
    """The processor saved beside the model's folder, then steps 1 to 3 on 64 x 64 inputs; the
    library's probabilities on the photos."""
    processor.save_pretrained(folder)
    pixels = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        logits = model(pixel_values=pixels).logits
    compare_forward(binary, folder, work, pixels, "pixels", logits)
    reference = hf_image_reference(model, processor)
    compare_classify(binary, str(folder), PHOTOS, reference)
    check_described(binary, folder, work, PHOTOS, reference, expect)
    return reference


def compare_served(binary: str, work: Path, folder: Path, reference: dict) -> None:
    """`attnzoo serve --config` with the folder as the model, its file route against the library."""
    sys.path.insert(0, str(REPO / "tools" / "scripts"))
    from load_test import ServeProcess
    config = work / "serve.yaml"
    config.write_text(f"models:\n  - name: hf\n    model: ./{folder.name}\n")
    serve = ServeProcess(binary, ["--config", str(config)])
    if not serve.started():
        fail(f"the server did not start: {''.join(serve.output)}")
    try:
        worst = 0.0
        for photo in PHOTOS:
            conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=60)
            classes = len(reference[str(photo)])
            conn.request("POST", f"/v2/models/hf/classify?top={classes}", body=photo.read_bytes())
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                fail(f"serve: {response.status} {body[:300]!r}")
            ours = np.zeros(classes)
            for p in json.loads(body)["predictions"]:
                ours[p["index"]] = p["prob"]
            worst = max(worst, float(np.abs(ours - reference[str(photo)]).max()))
        print(f"serve (config naming the folder): max |probability diff| {worst:.2e}")
        if worst > PROBABILITY_TOLERANCE:
            fail(f"served probabilities differ by {worst:.3e}")
    finally:
        if serve.stop() != 0:
            fail(f"the server did not exit cleanly: {''.join(serve.output)}")


def hf_vit(binary: str, work: Path, variant: str) -> None:
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor
    torch.manual_seed(0)
    labels = {i: f"class {i}" for i in range(12)}
    config = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, image_size=64, patch_size=16, id2label=labels,
                       label2id={v: k for k, v in labels.items()})
    model = ViTForImageClassification(config).eval()
    scale_head(model.classifier)
    folder = work / "vit-tiny-hf"
    if variant == "bin":
        model.save_pretrained(folder)
        (folder / "model.safetensors").unlink()
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    elif variant == "sharded":
        model.save_pretrained(folder, max_shard_size="100KB")
        if not (folder / "model.safetensors.index.json").exists():
            fail(f"save_pretrained wrote no index: {sorted(os.listdir(folder))}")
    else:
        model.save_pretrained(folder)
    reference = check_hf_image_folder(
        binary, work, folder, model, ViTImageProcessor(size={"height": 64, "width": 64}),
        {"architecture.norm_eps": 1e-12, "preprocess.crop_mode": "squash",
         "preprocess.interpolation": "bilinear", "labels": list(labels.values())})
    if variant == "safetensors":
        compare_served(binary, work, folder, reference)


def hf_deit(binary: str, work: Path) -> None:
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher, DeiTImageProcessor
    torch.manual_seed(1)
    config = DeiTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, image_size=64, patch_size=16, num_labels=7)
    model = DeiTForImageClassificationWithTeacher(config).eval()
    scale_head(model.cls_classifier, model.distillation_classifier)
    folder = work / "deit-tiny-hf"
    model.save_pretrained(folder)
    check_hf_image_folder(
        binary, work, folder, model,
        DeiTImageProcessor(size={"height": 73, "width": 73}, crop_size={"height": 64, "width": 64}),
        {"architecture.dist_token": True, "architecture.dist_head": True,
         "preprocess.interpolation": "bicubic"})


def speech_clips(work: Path) -> list:
    """Three utterances of espeak-ng's speech, at 16 kHz, 16-bit (written here)."""
    import torchaudio
    clips = []
    for i, text in enumerate(["the quick brown fox", "seven eight nine", "attention is all"]):
        raw = work / f"speech{i}_22k.wav"
        subprocess.run(["espeak-ng", "-w", str(raw), "-s", str(150 + 20 * i), text], check=True)
        with wave.open(str(raw)) as w:
            rate = w.getframerate()
            samples = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        resampled = torchaudio.functional.resample(
            torch.from_numpy(samples.astype(np.float32) / 32768.0), rate, 16000)
        pcm = (resampled.clamp(-1, 1) * 32767).round().to(torch.int16).numpy()
        path = work / f"speech{i}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(pcm.tobytes())
        clips.append(path)
    return clips


def hf_ast(binary: str, work: Path) -> None:
    from transformers import ASTConfig, ASTFeatureExtractor, ASTForAudioClassification
    torch.manual_seed(2)
    config = ASTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, max_length=128, num_mel_bins=64, num_labels=9)
    model = ASTForAudioClassification(config).eval()
    scale_head(model.classifier.dense)
    folder = work / "ast-tiny-hf"
    model.save_pretrained(folder)
    extractor = ASTFeatureExtractor(num_mel_bins=64, max_length=128)
    extractor.save_pretrained(folder)
    features = torch.randn(2, 128, 64)
    with torch.no_grad():
        logits = model(input_values=features).logits
    compare_forward(binary, folder, work, features, "features", logits, output="class_logits")
    clips = speech_clips(work)
    reference = {}
    for path in clips:
        with wave.open(str(path)) as w:
            samples = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16) / 32768.0
        inputs = extractor(samples.astype(np.float32), sampling_rate=16000, return_tensors="pt")
        with torch.no_grad():
            reference[str(path)] = torch.softmax(
                model(**inputs).logits.double(), -1)[0].numpy()
    compare_classify(binary, str(folder), clips, reference)
    check_described(binary, folder, work, clips, reference,
                    {"family": "ast", "features.frames": 128, "features.std": 2 * 4.5689974})


# --- timm ---------------------------------------------------------------------------------------

def timm_reference(model) -> dict:
    import timm.data
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    out = {}
    for path in PHOTOS:
        with Image.open(path) as image:
            x = transform(image.convert("RGB")).unsqueeze(0)
        with torch.no_grad():
            out[str(path)] = torch.softmax(model(x).double(), -1)[0].numpy()
    return out


def timm_folder(binary: str, work: Path, name: str, args: dict, safe: bool, expect: dict) -> None:
    import timm
    from timm.models import save_for_hf
    torch.manual_seed(3)
    model = timm.create_model(name, pretrained=False, **args).eval()
    heads = [model.head] + ([model.head_dist] if hasattr(model, "head_dist") else [])
    scale_head(*heads)
    folder = work / f"{name}-timm"
    save_for_hf(model, str(folder), model_args=args, safe_serialization=safe)
    size = model.pretrained_cfg["input_size"]
    pixels = torch.randn(2, *size)
    with torch.no_grad():
        logits = model(pixels)
    compare_forward(binary, folder, work, pixels, "pixels", logits)
    reference = timm_reference(model)
    compare_classify(binary, str(folder), PHOTOS, reference)
    check_described(binary, folder, work, PHOTOS, reference, expect)


def timm_training(binary: str, work: Path) -> None:
    """A .pth as timm's train.py saves it (CheckpointSaver): the model is the zoo's name."""
    import argparse
    import timm
    torch.manual_seed(4)
    model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=10).eval()
    scale_head(model.head)
    ema = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=10).eval()
    scale_head(ema.head)
    optimizer = torch.optim.AdamW(model.parameters())
    labels = "labels=[" + ", ".join(f"c{i}" for i in range(10)) + "]"
    path = work / "last.pth"
    torch.save({"epoch": 9, "arch": "vit_small_patch16_224", "state_dict": model.state_dict(),
                "optimizer": optimizer.state_dict(), "version": 2,
                "args": argparse.Namespace(model="vit_small_patch16_224", lr=5e-4, epochs=10),
                "state_dict_ema": ema.state_dict(), "metric": np.float64(71.5)}, path)
    result = subprocess.run([binary, "classify", "--model", "vit_small_patch16_224",
                             "--set", "architecture.num_classes=10", "--set", labels,
                             "--weights", str(path), str(PHOTOS[0])],
                            capture_output=True, text=True)
    if result.returncode == 0 or "--key state_dict" not in result.stderr:
        fail(f"a checkpoint with two state dicts loaded without --key:\n{result.stderr}")
    print(f"without --key: {result.stderr.strip()}")
    for key, reference_model in (("state_dict", model), ("state_dict_ema", ema)):
        compare_classify(binary, "vit_small_patch16_224", PHOTOS, timm_reference(reference_model),
                         extra=("--set", "architecture.num_classes=10", "--set", labels,
                                "--weights", str(path), "--key", key))


# --- torchvision --------------------------------------------------------------------------------

def torchvision_vit(binary: str, work: Path) -> None:
    import torchvision
    torch.manual_seed(5)
    model = torchvision.models.vit_b_32().eval()
    with torch.no_grad():  # torchvision starts its head at zero
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
        torch.nn.init.normal_(model.heads.head.bias, std=0.02)
    # 1000 classes over 12 layers: a milder scale keeps a grey level's rounding (PIL's resize
    # against LibTorch's, on a few pixels) below the tolerance.
    scale_head(model.heads.head, scale=5.0)
    path = work / "vit_b_32.pth"
    torch.save(model.state_dict(), path)
    pixels = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        logits = model(pixels)
    save_file({"pixels": pixels}, str(work / "input.safetensors"))
    attnzoo(binary, "forward", "--model", "vit_b_32", "--weights", str(path), "--input",
            str(work / "input.safetensors"), "--output", str(work / "output.safetensors"))
    ours = load_file(str(work / "output.safetensors"))["logits"]
    error = (ours.double() - logits.double()).abs().max().item()
    print(f"forward: logits {list(ours.shape)} max |diff| {error:.2e}")
    if error > LOGITS_TOLERANCE:
        fail(f"logits differ by {error:.3e} > {LOGITS_TOLERANCE}")
    transform = torchvision.models.ViT_B_32_Weights.IMAGENET1K_V1.transforms()
    reference = {}
    for photo in PHOTOS:
        with Image.open(photo) as image:
            x = transform(image.convert("RGB")).unsqueeze(0)
        with torch.no_grad():
            reference[str(photo)] = torch.softmax(model(x).double(), -1)[0].numpy()
    compare_classify(binary, "vit_b_32", PHOTOS, reference, extra=("--weights", str(path)))


def convert(binary: str, work: Path) -> None:
    torch.manual_seed(6)
    embed = torch.randn(10, 4)
    ema = {"embed.weight": embed, "head.weight": embed, "proj.weight": torch.randn(4, 6).t(),
           "scale": torch.randn(3).bfloat16(), "steps": torch.tensor(7)}
    path = work / "last.pth"
    torch.save({"state_dict": {"embed.weight": torch.zeros(10, 4)}, "state_dict_ema": ema,
                "epoch": 3}, path)
    result = subprocess.run([binary, "convert", str(path), str(work / "x.safetensors")],
                            capture_output=True, text=True)
    if result.returncode != 1 or "--key state_dict" not in result.stderr:
        fail(f"convert without --key: {result.returncode} {result.stderr}")
    print(attnzoo(binary, "convert", str(path), str(work / "ema.safetensors"), "--key",
                  "state_dict_ema").strip())
    back = load_file(str(work / "ema.safetensors"))
    if set(back) != set(ema):
        fail(f"converted names {sorted(back)}, saved {sorted(ema)}")
    for name, tensor in ema.items():
        if back[name].dtype != tensor.dtype or not torch.equal(back[name], tensor):
            fail(f"{name} differs after the conversion")
    from transformers import ViTConfig, ViTForImageClassification
    model = ViTForImageClassification(ViTConfig(hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=64,
                                                image_size=32, patch_size=16))
    model.save_pretrained(work / "sharded", max_shard_size="20KB")
    index = work / "sharded" / "model.safetensors.index.json"
    print(attnzoo(binary, "convert", str(index), str(work / "whole.safetensors")).strip())
    whole = load_file(str(work / "whole.safetensors"))
    state = {}  # the shards as the `safetensors` package reads them
    for shard in set(json.loads(index.read_text())["weight_map"].values()):
        state.update(load_file(str(work / "sharded" / shard)))
    if set(whole) != set(state) or any(not torch.equal(whole[k], state[k]) for k in state):
        fail("the sharded folder's tensors differ after the conversion")
    shards = len(set(json.loads(index.read_text())["weight_map"].values()))
    print(f"convert: {len(ema)} tensors of a training checkpoint and {len(state)} of "
          f"{shards} shards, equal")


CASES = {
    "hf_vit": lambda b, w: hf_vit(b, w, "safetensors"),
    "hf_vit_bin": lambda b, w: hf_vit(b, w, "bin"),
    "hf_vit_sharded": lambda b, w: hf_vit(b, w, "sharded"),
    "hf_deit": hf_deit,
    "hf_ast": hf_ast,
    "timm_vit": lambda b, w: timm_folder(
        b, w, "vit_small_patch16_224", {"depth": 2, "num_classes": 10}, False,
        {"architecture.depth": 2, "architecture.num_classes": 10,
         "preprocess.crop_pct": 0.9, "checkpoint.format": "timm"}),
    "timm_reg": lambda b, w: timm_folder(
        b, w, "vit_base_patch16_reg4_gap_256", {"depth": 2, "num_classes": 6}, True,
        {"architecture.reg_tokens": 4, "architecture.class_token": False,
         "architecture.global_pool": "avg"}),
    "timm_deit": lambda b, w: timm_folder(
        b, w, "deit_tiny_distilled_patch16_224", {"depth": 2, "num_classes": 5}, False,
        {"architecture.dist_token": True, "architecture.num_classes": 5}),
    "timm_training": timm_training,
    "torchvision": torchvision_vit,
    "convert": convert,
}


def main() -> None:
    case, binary, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if case not in CASES:
        fail(f"unknown case {case}; cases: {', '.join(CASES)}")
    work = out / case
    if work.exists():
        import shutil
        shutil.rmtree(work)
    work.mkdir(parents=True)
    torch.set_num_threads(1)
    CASES[case](binary, work)
    print("PASS")


if __name__ == "__main__":
    main()
