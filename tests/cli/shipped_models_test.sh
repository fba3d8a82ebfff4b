#!/usr/bin/env bash
# shipped_models_test.sh CASE ATTNZOO_BINARY PYTHON REPO_ROOT DATA_DIR: the zoo's shipped trained
# models (configs/vit/vit_digits*, configs/conformer/conformer_kws*, conformer_digits_ctc*) as the
# README's main command uses them, and their test figures against the training report
# (docs/training/results.json): `attnzoo eval` must reproduce each accuracy within 0.5 points,
# and the recognizer's word error rate, offline and in chunks of 16, within 0.5 points; with
# inference.quantize=int8, within 0.2 points (vit_digits) and 0.5 (conformer_kws) of the fp32
# figure (and the recognizer's WER within 0.3), also with bfloat16 activations between the int8
# products; in bfloat16, all three within 0.2 points of it; and the logits of the shipped samples
# within 0.05 of fp32's. The recognizer's beam search on its real outputs against
# flashlight-text's (torchaudio's ctc_decoder). DATA_DIR holds
# the test sets, made by tools/data/ (a CTest fixture; tools/setup.sh makes the same ones).
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 root=$4 data=$5
vit=$root/configs/vit/vit_digits.yaml
vit_w=$root/assets/weights/vit_digits.safetensors
kws=$root/configs/conformer/conformer_kws.yaml
kws_w=$root/assets/weights/conformer_kws.safetensors
digit=$root/assets/samples/digit_7.png
word=$root/assets/samples/keyword_stop.wav
asr=$root/configs/conformer/conformer_digits_ctc.yaml
asr_w=$root/assets/weights/conformer_digits_ctc.safetensors
spoken=$root/assets/samples/digits_417.wav

# check_accuracy MODEL [POINTS]: top1 of $out/stdout (attnzoo eval --json) within POINTS (0.5)
# points of the report's fp32 figure
check_accuracy() {
  "$py" - "$out/stdout" "$root/docs/training/results.json" "$1" "${2:-0.5}" <<'PY' || exit 1
import json
import sys

got = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))[sys.argv[3]]
points = float(sys.argv[4])
print(f"{sys.argv[3]}: eval top-1 {100 * got['top1']:.2f}%, report {100 * report['test_top1']:.2f}%"
      f" ({got['examples']} examples)")
assert got["examples"] == report["test_examples"], (got["examples"], report["test_examples"])
assert abs(got["top1"] - report["test_top1"]) <= points / 100 + 1e-9, \
    f"more than {points} points from the report"
PY
}

# check_logits FLOAT INT8 KEY BOUND: the int8 model's logits (KEY of attnzoo forward's output)
# within BOUND of the float model's, and the same class first
check_logits() {
  "$py" - "$@" <<'PY' || exit 1
import sys

from safetensors.torch import load_file

fp32, int8 = (load_file(f)[sys.argv[3]] for f in sys.argv[1:3])
bound = float(sys.argv[4])
diff = (fp32 - int8).abs().max().item()
print(f"{sys.argv[3]}: max |int8 - fp32| {diff:.4f} (logits span {fp32.min():.2f} .. "
      f"{fp32.max():.2f}), bound {bound}")
assert diff <= bound, diff
assert (fp32.argmax(-1) == int8.argmax(-1)).all()
assert diff > 0, "int8 gave the float logits exactly: was it used?"
PY
}

# check_wer KEY: the word error rate of $out/stdout (attnzoo eval --json) within 0.5 points of the
# report's conformer_digits_ctc KEY (test_wer, test_wer_chunk16)
# check_wer KEY [POINTS]: the WER of $out/stdout within POINTS (0.5) points of the report's KEY
check_wer() {
  "$py" - "$out/stdout" "$root/docs/training/results.json" "$1" "${2:-0.5}" <<'PY' || exit 1
import json
import sys

got = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))["conformer_digits_ctc"]
key = sys.argv[3]
print(f"conformer_digits_ctc: eval WER {100 * got['wer']:.2f}% ({got['word_counts']}), "
      f"report {key} {100 * report[key]:.2f}% ({got['examples']} utterances)")
assert got["examples"] == report["test_examples"], (got["examples"], report["test_examples"])
points = float(sys.argv[4])
assert abs(got["wer"] - report[key]) <= points / 100 + 1e-9, f"more than {points} points from the report"
PY
}

case "$case_name" in
  shipped_asr_eval)
    run 0 eval --model "$asr" --weights "$asr_w" --data "$data/digit_strings/test.txt" --json
    check_wer test_wer
    ;;
  shipped_asr_eval_bf16)
    # bfloat16 inference: within 0.2 points of the fp32 figure (the report's).
    run 0 eval --model "$asr" --weights "$asr_w" --data "$data/digit_strings/test.txt" --json \
      --dtype bf16
    check_wer test_wer 0.2
    ;;
  shipped_asr_eval_int8)
    # int8 inference, every call in int8: within 0.3 points of the fp32 WER.
    ATTNZOO_INT8_FALLBACK=0 run 0 eval --model "$asr" --weights "$asr_w" \
      --data "$data/digit_strings/test.txt" --json --set inference.quantize=int8
    check_wer test_wer 0.3
    ;;
  shipped_asr_eval_int8_bf16)
    # int8 products with bfloat16 activations between them (--dtype bf16 with int8, what
    # `--dtype auto` gives on a CPU with AVX512-BF16 or AMX): within 0.3 points of the fp32 WER.
    ATTNZOO_INT8_FALLBACK=0 run 0 eval --model "$asr" --weights "$asr_w" \
      --data "$data/digit_strings/test.txt" --json --set inference.quantize=int8 --dtype bf16
    check_wer test_wer 0.3
    ;;
  shipped_asr_eval_chunk16)
    # The offline view of streaming in chunks of 16 with all history (the live final equals it).
    run 0 eval --model "$asr" --weights "$asr_w" --data "$data/digit_strings/test.txt" --json \
      --set streaming.chunk_size=16
    check_wer test_wer_chunk16
    ;;
  shipped_asr_transcribe)
    # The README's main command: the sample, offline and live in chunks of 16 (partials, final).
    run 0 transcribe --model "$asr" --weights "$asr_w" "$spoken"
    expect stdout "^$spoken \([0-9]\.[0-9]{2} s, [0-9.]+ ms, confidence [01]\.[0-9]+\): four one seven$"
    run 0 transcribe --model "$asr" --weights "$asr_w" --live --chunk 16 --json "$spoken"
    "$py" - "$out/stdout" <<'PY' || exit 1
import json
import sys

lines = [json.loads(l) for l in open(sys.argv[1])]
final = lines[-1]
assert final["final"] and final["text"] == "four one seven", final
assert [t["token"] for t in final["tokens"]] == ["four", "one", "seven"], final
starts = [t["start"] for t in final["tokens"]]
assert starts == sorted(starts) and all(t["end"] <= final["seconds"] + 0.04 for t in final["tokens"])
partials = [l["partial"] for l in lines[:-1]]
assert partials and all(b.startswith(a) for a, b in zip(partials, partials[1:])), partials
# decoding.stable_margin shows "four" and "four one" while the audio still comes.
assert partials[:2] == ["four", "four one"], partials
assert lines[1]["at"] < final["seconds"] - 0.5, lines[1]
print("live:", partials, "->", final["text"])
PY
    ;;
  shipped_asr_decoder_parity)
    # A real model's outputs: our prefix beam search with flashlight-text's beam unit against
    # flashlight-text's LexiconFreeDecoder itself (what torchaudio's ctc_decoder runs, no lexicon,
    # no LM), on the first 40 test utterances: the same n-best texts, scores within 1e-4.
    head -n 40 "$data/digit_strings/test.txt" | cut -f1 | sed "s|^|$data/digit_strings/|" >"$out/files"
    mapfile -t files <"$out/files"
    run 0 encode --model "$asr" --weights "$asr_w" --out "$out/encoded.safetensors" "${files[@]}"
    run 0 transcribe --model "$asr" --weights "$asr_w" --json --beam 8 --nbest 8 \
      --set decoding.beam_unit=prefix_ending "${files[@]}"
    "$py" - "$out/stdout" "$out/encoded.safetensors" "$root/configs/labels/digit_words_units.txt" <<'PY' || exit 1
import itertools
import json
import math
import sys

import numpy as np
from flashlight.lib.text.decoder import (CriterionType, LexiconFreeDecoder,
                                         LexiconFreeDecoderOptions, ZeroLM)
from safetensors.numpy import load_file

ours = [json.loads(l) for l in open(sys.argv[1])]
encoded = load_file(sys.argv[2])
units = [l.split()[0] for l in sorted(open(sys.argv[3]), key=lambda l: int(l.split()[1]))]
blank, textless = units.index("<blank>"), units.index("<sos/eos>")
compared, worst = 0, 0.0
for i, row in enumerate(ours):
    lp = np.ascontiguousarray(encoded[f"log_probs_{i}"], dtype=np.float32)
    frames, vocab = lp.shape
    options = LexiconFreeDecoderOptions(
        beam_size=8, beam_size_token=vocab, beam_threshold=1e30, lm_weight=0.0, sil_score=0.0,
        log_add=True, criterion_type=CriterionType.CTC)
    decoder = LexiconFreeDecoder(options, ZeroLM(), blank, blank, [])
    merged = {}  # text -> log-probability, <sos/eos> left out as the recognizer does
    for r in decoder.decode(lp.ctypes.data, frames, vocab):
        tokens = [k for k, _ in itertools.groupby(list(r.tokens[1:-1])) if k != blank]
        text = " ".join(units[k] for k in tokens if k != textless)
        merged[text] = np.logaddexp(merged.get(text, -math.inf), r.score)
    reference = sorted(merged.items(), key=lambda kv: -kv[1])
    nbest = row.get("nbest", [{"text": row["text"], "score": row["score"]}])
    assert [h["text"] for h in nbest] == [t for t, _ in reference], (i, nbest, reference)
    for h, (_, score) in zip(nbest, reference):
        assert abs(h["score"] - score) < 1e-4, (i, h, score)
        worst = max(worst, abs(h["score"] - score))
        compared += 1
print(f"{len(ours)} utterances, {compared} hypotheses: the same texts as flashlight-text, "
      f"scores within {worst:.1e}")
PY
    ;;
  shipped_digits_eval)
    run 0 eval --model "$vit" --weights "$vit_w" --data "$data/digits/test.txt" --json
    check_accuracy vit_digits
    ;;
  shipped_keywords_eval)
    run 0 eval --model "$kws" --weights "$kws_w" --data "$data/keywords/test.txt" --json
    check_accuracy conformer_kws
    ;;
  shipped_digits_eval_int8)
    # Every call in int8 (ATTNZOO_INT8_FALLBACK=0): the shipped models' layers are 96 wide, and
    # batches of many rows would otherwise run them in float32 (layers/packed_linear.h).
    ATTNZOO_INT8_FALLBACK=0 run 0 eval --model "$vit" --weights "$vit_w" \
      --data "$data/digits/test.txt" --json --set inference.quantize=int8
    check_accuracy vit_digits 0.2
    ;;
  shipped_digits_eval_int8_bf16)
    ATTNZOO_INT8_FALLBACK=0 run 0 eval --model "$vit" --weights "$vit_w" \
      --data "$data/digits/test.txt" --json --set inference.quantize=int8 --dtype bf16
    check_accuracy vit_digits 0.2
    ;;
  shipped_digits_eval_bf16)
    run 0 eval --model "$vit" --weights "$vit_w" --data "$data/digits/test.txt" --json --dtype bf16
    check_accuracy vit_digits 0.2
    ;;
  shipped_keywords_eval_bf16)
    # Through the config's inference.dtype, as a model YAML or `--set` chooses it.
    run 0 eval --model "$kws" --weights "$kws_w" --data "$data/keywords/test.txt" --json \
      --set inference.dtype=bf16
    check_accuracy conformer_kws 0.2
    ;;
  shipped_keywords_eval_int8)
    ATTNZOO_INT8_FALLBACK=0 run 0 eval --model "$kws" --weights "$kws_w" \
      --data "$data/keywords/test.txt" --json --set inference.quantize=int8
    check_accuracy conformer_kws 0.5
    ;;
  shipped_keywords_eval_int8_bf16)
    ATTNZOO_INT8_FALLBACK=0 run 0 eval --model "$kws" --weights "$kws_w" \
      --data "$data/keywords/test.txt" --json --set inference.quantize=int8 --dtype bf16
    check_accuracy conformer_kws 0.5
    ;;
  shipped_int8_logits)
    run 0 preprocess --model "$vit" --out "$out/pixels.safetensors" "$digit"
    run 0 features --model "$kws" --out "$out/features.safetensors" "$word"
    for q in none int8; do
      run 0 forward --model "$vit" --weights "$vit_w" --input "$out/pixels.safetensors" \
        --set inference.quantize=$q --output "$out/vit_$q.safetensors"
      run 0 forward --model "$kws" --weights "$kws_w" --input "$out/features.safetensors" \
        --set inference.quantize=$q --output "$out/kws_$q.safetensors"
    done
    check_logits "$out/vit_none.safetensors" "$out/vit_int8.safetensors" logits 0.05
    check_logits "$out/kws_none.safetensors" "$out/kws_int8.safetensors" class_logits 0.05
    ;;
  shipped_classify_digit)
    run 0 classify --model "$vit" --weights "$vit_w" --topk 3 "$digit"
    expect stdout '^vit_digits \(.*vit_digits.yaml\), .*vit_digits.safetensors \(timm layout.*\), cpu, fp32$'
    # The most probable class first: the digit 7, confidently.
    sed -n 3p "$out/stdout" >"$out/first"
    expect first '^ +(9[0-9]|100)\.[0-9]{2}% +7  7$'
    lines stdout 5
    ;;
  shipped_classify_keyword)
    # The wav is classified; the PNG is not audio and gets its own error entry: exit status 1.
    run 1 classify --model "$kws" --weights "$kws_w" --topk 3 --json "$word" "$digit"
    lines stdout 2
    expect stderr '^attnzoo classify: 1 of 2 audio files failed$'
    "$py" - "$out/stdout" "$word" "$digit" <<'PY' || exit 1
import json
import sys

first, second = [json.loads(l) for l in open(sys.argv[1])]
assert first["audio"] == sys.argv[2] and "error" not in first, first
assert [p["label"] for p in first["top"]][0] == "stop", first
assert first["top"][0]["index"] == 8 and len(first["top"]) == 3, first
probs = [p["prob"] for p in first["top"]]
assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-9, probs
assert first["ms"] > 0, first
assert second["audio"] == sys.argv[3] and sys.argv[3] in second["error"], second
PY
    ;;
  shipped_classify_keyword_table)
    run 0 classify --model "$kws" --weights "$kws_w" --topk 2 "$word"
    expect stdout '^conformer_kws \(.*conformer_kws.yaml\), .*conformer_kws.safetensors'
    sed -n 3p "$out/stdout" >"$out/first"
    expect first '^ +(9[0-9]|100)\.[0-9]{2}% +8  stop$'
    lines stdout 4
    ;;
  shipped_encode_keyword)
    run 0 encode --model "$kws" --weights "$kws_w" --json --out "$out/encoded.safetensors" "$word"
    "$py" - "$out/stdout" "$out/encoded.safetensors" <<'PY' || exit 1
import json
import sys

import torch
from safetensors.torch import load_file

line = json.loads(open(sys.argv[1]).read())
assert abs(line["seconds"] - 1.0) < 1e-6, line
assert line["feature_frames"] == 98 and line["encoder_frames"] == 23, line  # conv2d4: (98 - 3) // 2 + 1 = 48, then 23
saved = load_file(sys.argv[2])
assert saved["encoded_0"].shape == (23, 96), saved["encoded_0"].shape
# The classification head's logits come with the encoding: "stop" (class 8) wins.
assert saved["logits_0"].shape == (12,) and int(saved["logits_0"].argmax()) == 8, saved["logits_0"]
assert torch.allclose(saved["embedding_0"], saved["encoded_0"].mean(0), atol=1e-6)
PY
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "PASS $case_name"
