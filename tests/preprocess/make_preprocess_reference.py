"""Reference tensors for the image frontend's tests (a CTest fixture).

    make_preprocess_reference.py OUT_DIR OPENCV_SAMPLES_DIR

Writes into OUT_DIR:
  images/     the photos of Debian's opencv-doc package (copied, or decompressed when the
              package ships them gzipped) and synthetic images written here with PIL: odd sizes
              and aspect ratios, every format (PNG, JPEG, WebP, BMP, TIFF), 8- and 16-bit,
              grayscale, alpha, palette, 1x1, and JPEGs carrying each EXIF orientation;
  bad/        inputs that must be refused: empty, truncated JPEG and PNG, a text file named
              .jpg, a PNG whose header claims 50000x50000 pixels;
  decoded.safetensors               each image as PIL decodes it, uint8 [H, W, 3];
  timm_<config>.safetensors         timm's eval transform (resolve_data_config +
                                    create_transform) of each image, keyed by image name;
  torchvision_<preset>.safetensors  torchvision's ImageClassification preset likewise;
  augment.safetensors               torchvision's functional colour, crop and elastic operations;
  manifest.json                     images, configs, which reference holds which image, and
                                    the size timm resized each image to.

References are computed on what PIL.Image.open(...).convert('RGB') gives, as timm's and
torchvision's loaders do, with two deliberate exceptions the frontend documents: EXIF
orientation is applied first (ImageOps.exif_transpose), and 16-bit images are reduced to 8 bits
by rounding v / 257 (PIL clips 16-bit grayscale to 255 in convert('RGB')).
"""
import gzip
import json
import shutil
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps
from safetensors.torch import save_file
from timm.data import create_transform, resolve_data_config
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF
from torchvision.transforms._presets import ImageClassification

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))

# The preprocessing of configs of the zoo and around it: (height, width, crop_pct,
# interpolation, mean, std).
CONFIGS = {
    "vit_base": (224, 224, 0.9, "bicubic", *HALF),  # vit_base_patch16_224.augreg2
    "deit": (224, 224, 0.875, "bicubic", *IMAGENET),  # deit_*_patch16_224
    "bilinear": (224, 224, 0.875, "bilinear", *IMAGENET),
    "vit_384": (384, 384, 1.0, "bicubic", *HALF),  # vit_base_patch16_384
    "micro": (32, 32, 0.9, "bicubic", *HALF),  # tests/configs/data/vit_micro_test.yaml
    "portrait": (224, 160, 0.95, "bilinear", *IMAGENET),  # non-square: ResizeKeepRatio
}

# torchvision presets (crop, resize, interpolation) and the config that describes each:
# crop_pct = crop / resize.
PRESETS = {
    "resize256": (224, 256, "bilinear"),  # the classic ImageNet eval, e.g. ViT_B_16 IMAGENET1K_V1
    "resize232": (224, 232, "bilinear"),  # the "new recipe" weights, e.g. RegNet, ResNet V2
    "swag384": (384, 384, "bicubic"),  # ViT_B_16_Weights.IMAGENET1K_SWAG_E2E_V1
}

PHOTOS = ["baboon.jpg", "starry_night.jpg", "fruits.jpg"]


def smooth_image(rng, height, width, channels=3):
    """A photo-like test card: smooth colour fields, edges and some noise."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    out = np.zeros((height, width, channels))
    for c in range(channels):
        fx, fy, phase = rng.uniform(0.5, 4.0), rng.uniform(0.5, 4.0), rng.uniform(0, 6.3)
        out[..., c] = 0.5 + 0.35 * np.sin(2 * np.pi * (fx * x / width + fy * y / height) + phase)
    # A hard-edged rectangle and noise, so that the resize filter has something to do.
    out[height // 4 : height // 2 + 1, width // 3 : 2 * width // 3 + 1, :] = rng.uniform(0, 1, channels)
    out += rng.normal(0, 0.04, out.shape)
    return np.clip(out, 0, 1)


def to_u8(a):
    return np.round(a * 255).astype(np.uint8)


def to_u16(a):
    return np.round(a * 65535).astype(np.uint16)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_png(path, width, height, bit_depth, color_type, raw_rows):
    """A PNG written by hand: PIL cannot write 16-bit RGB(A), and the bad inputs need a header
    that lies about the size."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                           png_chunk(b"IDAT", zlib.compress(raw_rows)) + png_chunk(b"IEND", b""))


def write_png16(path, array):
    """array: uint16 [H, W, C], C = 1 (gray), 2 (gray + alpha), 3 (RGB), 4 (RGBA)."""
    h, w, c = array.shape
    color_type = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    raw = b"".join(b"\x00" + array[row].astype(">u2").tobytes() for row in range(h))
    write_png(path, w, h, 16, color_type, raw)


def u16_as_pil(array):
    """The 8-bit RGB image the frontend makes of 16-bit samples: round(v / 257)."""
    eight = np.round(array.astype(np.float64) / 257.0).astype(np.uint8)
    if eight.shape[2] in (1, 2):
        eight = np.repeat(eight[..., :1], 3, axis=2)
    return Image.fromarray(np.ascontiguousarray(eight[..., :3]))


def exif_jpeg(path, image, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    image.save(path, quality=95, exif=exif.tobytes())


def synthetic_images(out):
    """name -> (file, PIL RGB image the reference is computed on, note)."""
    rng = np.random.default_rng(20240607)
    images = {}

    def add(name, file, reference, note):
        images[name] = (str(file.relative_to(out)), reference, note)

    def saved(name, suffix, pil_image, note, **save_args):
        file = out / "images" / f"{name}.{suffix}"
        pil_image.save(file, **save_args)
        add(name, file, Image.open(file).convert("RGB"), note)

    rgb = lambda h, w: Image.fromarray(to_u8(smooth_image(rng, h, w)))  # noqa: E731
    saved("png_37x53", "png", rgb(37, 53), "small: upscaled")
    saved("png_wide_97x1000", "png", rgb(97, 1000), "aspect ratio 10:1")
    saved("png_tall_700x61", "png", rgb(700, 61), "aspect ratio 1:11")
    saved("png_225x224", "png", rgb(225, 224), "almost square, odd")
    saved("jpeg_333x517", "jpg", rgb(333, 517), "JPEG q90 4:2:0", quality=90)
    saved("jpeg_444_301x199", "jpg", rgb(301, 199), "JPEG q95 4:4:4", quality=95, subsampling=0)
    saved("jpeg_progressive_257x263", "jpg", rgb(257, 263), "progressive JPEG", quality=90,
          progressive=True)
    saved("webp_lossless_211x300", "webp", rgb(211, 300), "WebP lossless", lossless=True)
    saved("webp_lossy_211x300", "webp", rgb(211, 300), "WebP lossy q90", quality=90)
    saved("bmp_97x129", "bmp", rgb(97, 129), "BMP 24-bit")
    saved("tiff_203x150", "tiff", rgb(203, 150), "TIFF uncompressed")
    saved("tiff_lzw_150x203", "tiff", rgb(150, 203), "TIFF LZW", compression="tiff_lzw")
    gray = Image.fromarray(to_u8(smooth_image(rng, 90, 120, 1)[..., 0]))
    saved("gray_png_90x120", "png", gray, "grayscale PNG")
    saved("gray_jpeg_90x120", "jpg", gray, "grayscale JPEG", quality=92)
    rgba = to_u8(smooth_image(rng, 80, 95, 4))
    rgba[..., 3] = np.linspace(0, 255, 95).astype(np.uint8)[None, :]
    saved("rgba_png_80x95", "png", Image.fromarray(rgba), "RGBA PNG: alpha dropped")
    saved("rgba_webp_80x95", "webp", Image.fromarray(rgba), "RGBA WebP: alpha dropped",
          lossless=True, exact=True)
    # OpenCV reads 8-bit TIFFs through libtiff's RGBA interface, which premultiplies an
    # unassociated alpha: the frontend composites such a TIFF on black where PIL drops the alpha.
    # The reference is that composite (libtiff's rounding: (v * a + 127) // 255).
    file = out / "images" / "rgba_tiff_80x95.tiff"
    Image.fromarray(rgba).save(file)
    composite = (rgba[..., :3].astype(np.int32) * rgba[..., 3:] + 127) // 255
    add("rgba_tiff_80x95", file, Image.fromarray(composite.astype(np.uint8)),
        "RGBA TIFF: composited on black (PIL drops the alpha)")
    la = np.stack([to_u8(smooth_image(rng, 70, 50, 1)[..., 0]), rgba[:70, :50, 3]], axis=2)
    saved("la_png_70x50", "png", Image.fromarray(la), "gray + alpha PNG")
    palette = rgb(64, 48).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    saved("palette_png_64x48", "png", palette, "palette PNG with transparency", transparency=0)
    saved("one_pixel_png", "png", Image.new("RGB", (1, 1), (200, 30, 90)), "1x1")
    saved("one_pixel_jpeg", "jpg", Image.new("RGB", (1, 1), (20, 130, 240)), "1x1 JPEG",
          quality=95)
    saved("png_2x3", "png", rgb(2, 3), "2x3")

    # 16 bits: the frontend rounds to 8 bits; the reference is that 8-bit image.
    gray16 = to_u16(smooth_image(rng, 83, 111, 1))
    file = out / "images" / "gray16_png_83x111.png"
    Image.fromarray(np.ascontiguousarray(gray16[..., 0])).save(file)
    add("gray16_png_83x111", file, u16_as_pil(gray16), "16-bit grayscale PNG")
    file = out / "images" / "gray16_tiff_83x111.tiff"
    Image.fromarray(np.ascontiguousarray(gray16[..., 0])).save(file)
    add("gray16_tiff_83x111", file, u16_as_pil(gray16), "16-bit grayscale TIFF")
    for name, channels in [("rgb16_png_77x64", 3), ("rgba16_png_77x64", 4)]:
        a = to_u16(smooth_image(rng, 77, 64, channels))
        file = out / "images" / f"{name}.png"
        write_png16(file, a)
        add(name, file, u16_as_pil(a), f"16-bit {'RGBA' if channels == 4 else 'RGB'} PNG")

    # EXIF orientations 1-8 on a non-square image: the reference is the upright image.
    base = rgb(40, 64)
    for orientation in range(1, 9):
        file = out / "images" / f"exif_orientation_{orientation}.jpg"
        exif_jpeg(file, base, orientation)
        upright = ImageOps.exif_transpose(Image.open(file)).convert("RGB")
        add(f"exif_orientation_{orientation}", file, upright, f"EXIF orientation {orientation}")
    return images


def photos(out, samples):
    found = {}
    for name in PHOTOS:
        target = out / "images" / name
        plain, packed = Path(samples) / name, Path(samples) / (name + ".gz")
        if plain.is_file():
            shutil.copyfile(plain, target)
        elif packed.is_file():
            with gzip.open(packed, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            continue
        found[Path(name).stem] = (str(target.relative_to(out)), Image.open(target).convert("RGB"),
                                  f"opencv-doc photo {name}")
    return found


def bad_inputs(out, jpeg_file, png_file):
    bad = out / "bad"
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "text.jpg").write_text("This is a text file, not a JPEG.\n")
    data = Path(jpeg_file).read_bytes()
    (bad / "truncated.jpg").write_bytes(data[: len(data) * 6 // 10])
    data = Path(png_file).read_bytes()
    (bad / "truncated.png").write_bytes(data[: len(data) - 30])
    # 50000 x 50000 RGB (7.5 GB decoded) in a few hundred bytes: two rows of data.
    write_png(bad / "huge_header.png", 50000, 50000, 8, 2, (b"\x00" + b"\x00" * 150000) * 2)


def timm_transform(config):
    height, width, crop_pct, interpolation, mean, std = config
    data_config = resolve_data_config(
        dict(input_size=(3, height, width), crop_pct=crop_pct, interpolation=interpolation,
             mean=mean, std=std))
    return create_transform(**data_config)


def resized_size(transform, image):
    """The (height, width) after the transform's Resize step: the geometry the C++ plan must
    reproduce exactly."""
    resize = transform.transforms[0]
    w, h = resize(image).size
    return [h, w]


def augment_references(out):
    rng = np.random.default_rng(7)
    image = torch.from_numpy(smooth_image(rng, 45, 67).transpose(2, 0, 1).astype(np.float32))
    tensors = {"image": image.contiguous()}
    tensors["brightness_1.3"] = TF.adjust_brightness(image, 1.3)
    tensors["brightness_0.4"] = TF.adjust_brightness(image, 0.4)
    tensors["contrast_0.6"] = TF.adjust_contrast(image, 0.6)
    tensors["contrast_1.5"] = TF.adjust_contrast(image, 1.5)
    tensors["saturation_1.7"] = TF.adjust_saturation(image, 1.7)
    tensors["saturation_0.2"] = TF.adjust_saturation(image, 0.2)
    tensors["hue_0.23"] = TF.adjust_hue(image, 0.23)
    tensors["hue_-0.4"] = TF.adjust_hue(image, -0.4)
    # torchvision's resized_crop on the PIL image (RandomResizedCrop's path), box (top, left,
    # height, width) = (5, 9, 30, 41), to 24x20 (HxW).
    pil = Image.fromarray(to_u8(image.numpy().transpose(1, 2, 0)))
    tensors["image_u8"] = torch.from_numpy(np.asarray(pil).copy()).permute(2, 0, 1).contiguous()
    for mode, name in [(InterpolationMode.BILINEAR, "bilinear"), (InterpolationMode.BICUBIC, "bicubic")]:
        crop = TF.resized_crop(pil, 5, 9, 30, 41, [24, 20], interpolation=mode)
        tensors[f"resized_crop_{name}"] = torch.from_numpy(np.asarray(crop).copy()).permute(2, 0, 1).contiguous()
    # torchvision's elastic_transform (ElasticTransform once its field is drawn) on the float
    # image: a smooth random displacement in grid_sample's normalised units, [1, H, W, 2] (x, y),
    # and the same in pixels [2, H, W] (x, y) as attnzoo's elastic() takes it.
    h, w = image.shape[1:]
    field = torch.from_numpy(rng.uniform(-1, 1, size=(1, 2, h, w)).astype(np.float32))
    field = TF.gaussian_blur(field, [9, 9], [2.0, 2.0]) * torch.tensor([6.0, 4.0]).view(1, 2, 1, 1)
    tensors["elastic_displacement_px"] = field[0].clone()
    normalised = (field[0] * torch.tensor([2.0 / w, 2.0 / h]).view(2, 1, 1)).permute(1, 2, 0)
    # fill=None: grid_sample's zero padding. (A fill value, even 0, also multiplies each pixel by
    # the fraction of its sample that lies inside, which darkens the edges.)
    tensors["elastic"] = TF.elastic_transform(image, normalised.unsqueeze(0),
                                              interpolation=InterpolationMode.BILINEAR, fill=None)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "augment.safetensors"))


def main():
    out, samples = Path(sys.argv[1]), sys.argv[2]
    shutil.rmtree(out, ignore_errors=True)
    (out / "images").mkdir(parents=True)
    (out / "bad").mkdir()
    torch.set_num_threads(1)

    images = photos(out, samples)
    photo_names = list(images)
    synthetic = synthetic_images(out)
    images.update(synthetic)
    bad_inputs(out, out / synthetic["jpeg_333x517"][0], out / synthetic["png_37x53"][0])

    manifest = {
        "photos": photo_names,
        "missing_photos": [p for p in PHOTOS if Path(p).stem not in images],
        # size: [width, height] as stored (before EXIF orientation), what the header reader sees.
        "images": {name: {"file": file, "note": note, "size": list(Image.open(out / file).size)}
                   for name, (file, _, note) in images.items()},
        "configs": {name: dict(height=c[0], width=c[1], crop_pct=c[2], interpolation=c[3],
                               mean=list(c[4]), std=list(c[5])) for name, c in CONFIGS.items()},
        "timm": {},
        "torchvision": {},
    }
    # The decoded pixels themselves: uint8 [H, W, 3], for the decoder's own parity.
    save_file({name: torch.from_numpy(np.asarray(image).copy()) for name, (_, image, _) in images.items()},
              str(out / "decoded.safetensors"))
    exif_names = [n for n in images if n.startswith("exif_")]
    for config_name, config in CONFIGS.items():
        # Every image under the configs the zoo uses most; the photos and a few shapes otherwise.
        if config_name in ("vit_base", "deit"):
            names = [n for n in images if n != "rgba_tiff_80x95"]  # not PIL's pixels
        else:
            names = photo_names + ["png_37x53", "png_wide_97x1000", "png_tall_700x61",
                                   "one_pixel_png", "png_2x3", "jpeg_333x517"]
        transform = timm_transform(config)
        tensors, resized = {}, {}
        for name in names:
            tensors[name] = transform(images[name][1]).contiguous()
            resized[name] = resized_size(transform, images[name][1])
        save_file(tensors, str(out / f"timm_{config_name}.safetensors"))
        manifest["timm"][config_name] = {"images": names, "resized": resized,
                                         "transform": repr(transform)}
    for preset_name, (crop, resize, interpolation) in PRESETS.items():
        mode = InterpolationMode.BICUBIC if interpolation == "bicubic" else InterpolationMode.BILINEAR
        preset = ImageClassification(crop_size=crop, resize_size=resize, interpolation=mode)
        names = photo_names + ["png_37x53", "png_wide_97x1000", "webp_lossy_211x300",
                               "rgba_png_80x95"] + exif_names[5:6]
        tensors = {name: preset(images[name][1]).contiguous() for name in names}
        save_file(tensors, str(out / f"torchvision_{preset_name}.safetensors"))
        manifest["torchvision"][preset_name] = {
            "images": names,
            "config": dict(height=crop, width=crop, crop_pct=crop / resize,
                           interpolation=interpolation, mean=list(IMAGENET[0]),
                           std=list(IMAGENET[1])),
            "transform": repr(preset),
        }
    augment_references(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"{len(images)} images ({len(photo_names)} photos), {len(CONFIGS)} timm configs, "
          f"{len(PRESETS)} torchvision presets -> {out}")
    if manifest["missing_photos"]:
        print(f"missing opencv-doc photos in {samples}: {manifest['missing_photos']}")


if __name__ == "__main__":
    main()
