"""Speech synthesized with espeak-ng for the zoo's data sets (make_keywords.py, make_digit_strings.py).

What the data sets share: the English accents and voice variants of Debian 12's espeak-ng 1.51, the
fixed set of variants that only test sets use, espeak-ng's output resampled to 16 kHz, background
noises, and the stamp that says whether a written split is still what its script makes.
"""
import argparse
import hashlib
import io
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import wave

import numpy as np

RATE = 16000
ACCENTS = ["en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd",
           "en-029", "en-us-nyc"]
VARIANTS = """adam Alex Alicia Andrea Andy anika anikaRobot Annie announcer antonio AnxiousAndy aunty
belinda benjamin boris caleb croak david Demonic Denis Diogo ed edward edward2 f1 f2 f3 f4 f5 fast
Gene Gene2 grandma grandpa gustave Henrique Hugo iven iven2 iven3 iven4 Jacky john kaukovalta klatt
klatt2 klatt3 klatt4 klatt5 klatt6 Lee linda m1 m2 m3 m4 m5 m6 m7 m8 marcelo Marco Mario max
Michael michel miguel Mike Mr Nguyen norbert pablo paul pedro quincy RicishayMax RicishayMax2
RicishayMax3 rob robert robosoft robosoft2 robosoft3 robosoft4 robosoft5 robosoft6 robosoft7
robosoft8 sandro shelby steph steph2 steph3 Storm travis Tweaky UniRobot victor whisper whisperf
zac""".split()
# The variants of the test splits: no training split ever uses them.
TEST_VARIANTS = ["Andy", "Annie", "david", "edward2", "f3", "grandma", "iven3", "klatt3", "linda",
                 "m4", "Mario", "norbert", "pablo", "robosoft4", "steph2", "travis", "zac"]
TRAIN_VARIANTS = [v for v in VARIANTS if v not in TEST_VARIANTS]


def check_espeak(script):
    """None when espeak-ng runs, else the message to print."""
    try:
        subprocess.run(["espeak-ng", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return f"{script}: espeak-ng not found (Debian package espeak-ng)"
    return None


def synthesize(text, voice, speed, pitch, data_path=None):
    """espeak-ng's output (22050 Hz) as float64 in [-1, 1], and its rate. data_path: the folder
    holding the espeak-ng-data to use (private_voices), else the system's."""
    path = [f"--path={data_path}"] if data_path else []
    result = subprocess.run(["espeak-ng", *path, "-v", voice, "-s", str(speed), "-p", str(pitch),
                             "--stdout", text], capture_output=True, check=False)
    if result.returncode != 0 or not result.stdout:
        raise RuntimeError(f"espeak-ng -v {voice} '{text}' failed: "
                           f"{result.stderr.decode(errors='replace').strip()}")
    with wave.open(io.BytesIO(result.stdout)) as w:
        rate, frames = w.getframerate(), w.readframes(w.getnframes())
    return np.frombuffer(frames, dtype="<i2").astype(np.float64) / 32768.0, rate


def random_variant(rng, name, independent_formants=False):
    """The text of an espeak-ng voice variant file of random settings: a speaker of espeak-ng's
    own making, to widen the voices a training split hears. The settings are the ones espeak-ng's
    shipped variants use, in about their spans (the test split's variants left out of that
    reading): every formant's frequency one factor of the variant's (0.8 to 1.5) jittered by 7%,
    with its height and width, the upper formants (6 to 8) damped in some; the pitch range; and in
    some variants an echo, breathiness, a frequency response (tone), flutter, roughness, voicing
    and consonant levels.

    With independent_formants each of formants 0 to 5 draws its own factor (0.8 to 1.6), so that
    the vowels' formant ratios move too (a first formant raised while the second is raised more,
    as in some shipped female variants), and the second consonant level reaches down to 10."""
    scale = rng.uniform(0.8, 1.5)
    low = int(rng.integers(60, 241))
    consonant_floor = 10 if independent_formants else 60
    lines = [f"name {name}", "language variant",
             f"pitch {low} {low + int(rng.integers(20, 141))}",
             f"flutter {int(rng.integers(0, 21))}", f"roughness {int(rng.integers(0, 5))}",
             f"voicing {int(rng.integers(30, 151))}",
             f"consonants {int(rng.integers(60, 121))} {int(rng.integers(consonant_floor, 121))}"]
    for k in range(6):
        factor = rng.uniform(0.8, 1.6) if independent_formants else scale * rng.uniform(0.93, 1.07)
        lines.append(f"formant {k} {round(100 * factor)} "
                     f"{int(rng.integers(60, 161))} {int(rng.integers(70, 141))}")
    damped = rng.random() < 0.3
    for k in range(6, 9):
        height = int(rng.integers(10, 51)) if damped else int(rng.integers(80, 121))
        lines.append(f"formant {k} {round(100 * scale)} {height} 100")
    if rng.random() < 0.3:
        lines.append(f"echo {int(rng.integers(20, 140))} {int(rng.integers(10, 51))}")
    if rng.random() < 0.3:
        lines.append("breath " + " ".join(str(int(rng.integers(0, 16))) for _ in range(8)))
        lines.append("breathw " + " ".join(str(int(rng.integers(100, 401))) for _ in range(6)))
    if rng.random() < 0.3:
        lines.append("tone " + " ".join(f"{f} {int(rng.integers(60, 256))}"
                                        for f in (500, 1200, 2000, 3000)))
    return "\n".join(lines) + "\n"


def private_voices(folder, variants):
    """A copy of the system's espeak-ng-data under `folder` with the voice variant files
    `variants` ({name: text}) added; returns the path to give synthesize (espeak-ng --path)."""
    info = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout
    system = info.split("Data at:")[-1].strip()
    data = os.path.join(folder, "espeak-ng-data")
    if os.path.isdir(data):
        shutil.rmtree(data)
    shutil.copytree(system, data)
    for name, text in variants.items():
        with open(os.path.join(data, "voices", "!v", name), "w") as f:
            f.write(text)
    return folder


def resample(x, rate, half_width=32):
    """Band-limited resampling to 16 kHz: each output sample is a Kaiser-windowed sinc (cut off
    at 0.95 of the lower Nyquist frequency) over the 2 * half_width nearest input samples. The
    output positions n * rate / 16000 repeat their fractional parts every 16000 / gcd samples, so
    the filter is computed once per phase, from exact integer positions."""
    if rate == RATE:
        return x
    g = math.gcd(RATE, int(rate))
    up, down = RATE // g, int(rate) // g  # output n sits at input position n * down / up
    cutoff = 0.95 * min(1.0, up / down)  # of the input's Nyquist frequency
    taps = np.arange(-half_width + 1, half_width + 1)
    phase = np.arange(up)
    d = ((phase * down) % up / up)[:, None] - taps[None, :]  # [up, taps]
    window = np.i0(8.6 * np.sqrt(np.clip(1.0 - (d / half_width) ** 2, 0.0, 1.0))) / np.i0(8.6)
    filters = cutoff * np.sinc(cutoff * d) * window
    out = len(x) * up // down
    n = np.arange(out)
    base = n * down // up
    padded = np.concatenate([np.zeros(half_width), x, np.zeros(half_width)])
    return (filters[n % up] * padded[base[:, None] + taps[None, :] + half_width]).sum(axis=1)


def trim_quiet_ends(x, threshold=0.02):
    """x without the leading and trailing samples quieter than threshold x its peak."""
    loud = np.flatnonzero(np.abs(x) > threshold * np.abs(x).max())
    return x[loud[0]:loud[-1] + 1] if loud.size else x


def colored_noise(rng, n, kind):
    """n samples of white, pink, brown noise or mains hum (kind), not normalised."""
    if kind == "hum":
        f0 = rng.choice([50.0, 60.0])
        t = np.arange(n) / RATE
        x = sum(rng.uniform(0.2, 1.0) / k * np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 6.3))
                for k in range(1, 6))
        return x + 0.05 * rng.standard_normal(n)
    white = rng.standard_normal(n)
    if kind == "white":
        return white
    spectrum = np.fft.rfft(white)
    f = np.maximum(np.fft.rfftfreq(n, 1.0 / RATE), 20.0)
    spectrum /= np.sqrt(f) if kind == "pink" else f
    return np.fft.irfft(spectrum, n)


def rms(x):
    return float(np.sqrt(np.mean(x * x)) + 1e-12)


def write_wav(path, clip):
    """clip (float, [-1, 1]) as 16 kHz mono 16-bit PCM."""
    pcm = np.clip(np.round(clip * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())


def recipe_stamp(script_path, *parts):
    """What a written split was made by: the script's and this module's contents, espeak-ng's
    version and the split's own parts (its name, its size)."""
    digest = hashlib.sha256()
    for path in (script_path, __file__):
        with open(path, "rb") as f:
            digest.update(f.read())
    version = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout
    return " ".join(str(p) for p in parts) + f" {digest.hexdigest()} {version.strip()}\n"


def split_arguments(doc, splits):
    """The command line of a data set script: OUTPUT, --split (one of `splits`), --jobs."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("output", help="the dataset folder to write")
    parser.add_argument("--split", choices=sorted(splits), required=True)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    return parser.parse_args()


def write_split(script_path, args, count, prepare_jobs, make, separator):
    """Writes split args.split of a data set into args.output unless the stamp there says it is
    complete and made as this script makes it: the jobs of prepare_jobs() through make (a
    function of one job, returning the file written and its label or transcript) on args.jobs
    processes, with progress lines; then OUTPUT/<split>.txt, a line per file ("PATH", separator,
    label), and the stamp. Returns the exit status."""
    script = os.path.basename(script_path)
    missing = check_espeak(script)
    if missing:
        print(missing, file=sys.stderr)
        return 1
    stamp = recipe_stamp(script_path, args.split, count)
    stamp_path = os.path.join(args.output, f"{args.split}.recipe")
    if os.path.isfile(stamp_path) and open(stamp_path).read() == stamp:
        return 0
    jobs = prepare_jobs()
    lines = []
    with multiprocessing.Pool(max(1, args.jobs)) as pool:
        for done, (path, label) in enumerate(pool.imap(make, jobs, chunksize=16)):
            lines.append(f"{os.path.relpath(path, args.output)}{separator}{label}\n")
            if (done + 1) % max(1, count // 10) == 0 or done + 1 == count:
                print(f"{script}: {args.split} {done + 1}/{count}", flush=True)
    with open(os.path.join(args.output, f"{args.split}.txt"), "w") as f:
        f.writelines(lines)
    with open(stamp_path, "w") as f:
        f.write(stamp)
    return 0
