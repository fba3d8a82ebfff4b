#!/usr/bin/env python3
"""Synthesize the connected-digit data set of the zoo's conformer_digits_ctc recognizer with espeak-ng.

Each utterance is a string of 1 to 7 digits read as words ("four one seven", "oh nine", "zero"; a
0 is read "zero" or "oh" at random), made by espeak-ng (Debian 12's 1.51) with a random English
accent and voice variant, speed, pitch, pauses between some digits, silence before and after,
level and background noise (white, pink, brown or mains hum at 10 to 30 dB SNR, or none). 16 kHz
mono 16-bit PCM.

Splits with disjoint voice variants:
  train  10000 utterances from the training variants (espeak_speech.TRAIN_VARIANTS without
         VAL_VARIANTS);
  train_voices  10000 more, half from those variants and half from 400 variants of random pitch
         and formants (espeak_speech.random_variant) written into a private copy of espeak-ng's
         data: the voices the validation errors of a model trained on `train` asked for;
  train_formants  10000 more, half from the training variants and half from 400 random variants
         whose formants move independently of each other (random_variant's
         independent_formants): the voices the validation errors of the second stage asked for;
  val      600 from VAL_VARIANTS, carved out of the training variants: the split on which
         recipes are chosen, never heard in training;
  test    1000 from espeak_speech.TEST_VARIANTS, heard by no recipe choice either: its word error
         rate is reported once, at the end.
Utterances come from seeded generators (numpy's PCG64, one per utterance), so a split is the
same on every run.

    make_digit_strings.py --split test OUTPUT_DIR

writes OUTPUT_DIR/<split>/<index>-<accent>+<variant>.wav and OUTPUT_DIR/<split>.txt, lines of
"PATH<TAB>TRANSCRIPT" (the audio_list format of `attnzoo train` with train.loss ctc). Idempotent:
a complete split is left as it is.
"""
import os
import sys

import numpy as np

from espeak_speech import (ACCENTS, RATE, TEST_VARIANTS, TRAIN_VARIANTS, colored_noise,
                           private_voices, random_variant, resample, rms, split_arguments,
                           synthesize, trim_quiet_ends, write_split, write_wav)

DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
VAL_VARIANTS = ["Alicia", "boris", "f2", "Hugo", "klatt5", "m6", "Michael", "robosoft6", "shelby",
                "whisper"]
# The random variants of each split that has them: (names, seed of their settings, whether each
# formant draws its own factor).
RANDOM_VARIANTS = {
    "train_voices": ([f"random{i:03d}" for i in range(400)], 15, False),
    "train_formants": ([f"formants{i:03d}" for i in range(400)], 17, True),
}
SPLITS = {
    "train": (10000, 11, [v for v in TRAIN_VARIANTS if v not in VAL_VARIANTS]),
    "train_voices": (10000, 14, [v for v in TRAIN_VARIANTS if v not in VAL_VARIANTS]),
    "train_formants": (10000, 16, [v for v in TRAIN_VARIANTS if v not in VAL_VARIANTS]),
    "val": (600, 12, VAL_VARIANTS),
    "test": (1000, 13, TEST_VARIANTS),
}


def make_utterance(job):
    split, index, folder, data_path = job
    count, seed, variants = SPLITS[split]
    rng = np.random.default_rng([seed, index])
    random_voice = data_path is not None and rng.random() < 0.5
    if random_voice:
        variants = RANDOM_VARIANTS[split][0]
    digits = rng.integers(0, 10, size=int(rng.integers(1, 8)))
    words = ["oh" if d == 0 and rng.random() < 0.5 else DIGIT_WORDS[d] for d in digits]
    # A comma makes espeak-ng pause; the transcript has none.
    spoken = words[0] + "".join((", " if rng.random() < 0.15 else " ") + w for w in words[1:])
    accent = ACCENTS[rng.integers(len(ACCENTS))]
    variant = variants[rng.integers(len(variants))]
    speech, rate = synthesize(spoken, f"{accent}+{variant}", int(rng.integers(120, 221)),
                              int(rng.integers(15, 86)), data_path if random_voice else None)
    speech = trim_quiet_ends(resample(speech, rate))
    before, after = (int(RATE * rng.uniform(0.05, 0.6)) for _ in range(2))
    clip = np.zeros(before + len(speech) + after)
    clip[before:before + len(speech)] = speech / (np.abs(speech).max() + 1e-12)
    clip *= 10.0 ** (rng.uniform(-24.0, -1.0) / 20.0)  # peak level, dBFS
    kind = rng.choice(["none", "white", "pink", "brown", "hum"], p=[0.2, 0.2, 0.25, 0.2, 0.15])
    if kind != "none":
        noise = colored_noise(rng, len(clip), kind)
        level = rms(clip[before:before + len(speech)]) * 10.0 ** (-rng.uniform(10.0, 30.0) / 20.0)
        clip += noise * (level / rms(noise))
    path = os.path.join(folder, f"{index:05d}-{accent}+{variant}.wav")
    write_wav(path, clip)
    return path, " ".join(words)


def main() -> int:
    args = split_arguments(__doc__, SPLITS)
    count = SPLITS[args.split][0]

    def prepare_jobs():
        folder = os.path.join(args.output, args.split)
        os.makedirs(folder, exist_ok=True)
        data_path = None
        if args.split in RANDOM_VARIANTS:
            names, seed, independent = RANDOM_VARIANTS[args.split]
            voices = np.random.default_rng(seed)
            data_path = private_voices(
                os.path.join(args.output, f"espeak_voices_{args.split}"),
                {name: random_variant(voices, name, independent) for name in names})
        return [(args.split, index, folder, data_path) for index in range(count)]

    return write_split(__file__, args, count, prepare_jobs, make_utterance, "\t")


if __name__ == "__main__":
    sys.exit(main())
