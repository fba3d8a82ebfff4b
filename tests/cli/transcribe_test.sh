#!/usr/bin/env bash
# transcribe_test.sh CASE ATTNZOO_BINARY PYTHON CONFIGS_DATA_DIR: `attnzoo transcribe` on WAV files
# made here, with the small streaming Conformer of CONFIGS_DATA_DIR (random weights, a CTC head of
# 7 outputs) and a token table written here: the table and JSON lines, an error entry per bad
# file, n-best, greedy search, the live partial results and their final result against the
# offline decode under the same chunk mask, and the refusals of bad tables and flags.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 data=$4
yaml=$data/conformer_micro_stream.yaml
printf '<blank> 0\n<unk> 1\nalpha 2\nbravo 3\ncharlie 4\ndelta 5\n<sos/eos> 6\n' >"$out/units.txt"
words=(--units "$out/units.txt" --set decoding.text=words)
# Noise bursts over a chirp (2.2 s and 1.4 s at 16 kHz, 1.1 s at 8 kHz), and one too short.
"$py" - "$out" <<'PY'
import sys, wave
import numpy as np
rng = np.random.default_rng(5)
for name, rate, seconds in (("a.wav", 16000, 2.2), ("b.wav", 16000, 1.4), ("c.wav", 8000, 1.1),
                            ("short.wav", 16000, 0.04)):
    n = int(rate * seconds)
    t = np.arange(n) / rate
    x = 0.2 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.3 * rng.standard_normal(n) * (np.sin(7 * t) > 0)
    with wave.open(f"{sys.argv[1]}/{name}", "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
PY

case "$case_name" in
  transcribe_table)
    run 1 transcribe --model "$yaml" "${words[@]}" --times "$out/a.wav" "$out/missing.wav" \
      "$out/short.wav"
    expect stdout "^conformer_micro_stream \(.*\), random weights \(seed 0\), units $out/units.txt, prefix_beam beam 10$"
    expect stdout "^$out/a.wav \(2.20 s, [0-9.]+ ms, confidence [0-9.]+\): [a-z<> ]*$"
    expect stdout "^$out/missing.wav: error: .*missing.wav"
    expect stdout "^$out/short.wav: error: .*short.wav: too short"
    expect stderr '^attnzoo transcribe: 2 of 3 files failed$'
    # --times: a token with its span in seconds, in steps of the 40 ms frame period.
    expect stdout '^  ([a-z<>]+\([0-9]+\.[0-9]{2}-[0-9]+\.[0-9]{2}\) ?)*$'
    ;;
  transcribe_json)
    run 1 transcribe --model "$yaml" "${words[@]}" --json --nbest 3 --batch-size 2 \
      "$out/a.wav" "$out/missing.wav" "$out/b.wav" "$out/c.wav"
    lines stdout 4
    "$bin" transcribe --model "$yaml" "${words[@]}" --json --nbest 3 --batch-size 1 \
      "$out/a.wav" "$out/b.wav" "$out/c.wav" >"$out/one.jsonl" 2>/dev/null || exit 1
    "$bin" transcribe --model "$yaml" "${words[@]}" --json --greedy "$out/a.wav" \
      >"$out/greedy.jsonl" 2>/dev/null || exit 1
    "$bin" encode --model "$yaml" --out "$out/e.safetensors" "$out/a.wav" >/dev/null || exit 1
    "$py" - "$out" <<'PY' || exit 1
import itertools, json, sys
import numpy as np
from safetensors.numpy import load_file
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/stdout")]
assert [r["audio"].rsplit("/", 1)[1] for r in rows] == ["a.wav", "missing.wav", "b.wav", "c.wav"]
assert "error" in rows[1] and "missing.wav" in rows[1]["error"] and "text" not in rows[1]
words = ["<blank>", "<unk>", "alpha", "bravo", "charlie", "delta", "<sos/eos>"]
for r in (rows[0], rows[2], rows[3]):
    assert set(r) >= {"audio", "text", "score", "confidence", "tokens", "seconds", "ms"}, r
    assert r["text"] == " ".join(t["token"] for t in r["tokens"]), r
    for t in r["tokens"]:
        assert words[t["id"]] == t["token"] and 0 <= t["start"] < t["end"] <= r["seconds"] + 0.2
        assert 0.0 < t["confidence"] <= 1.0
    # The n-best: distinct texts, best first, the first the result itself.
    nbest = r.get("nbest", [])
    assert 1 < len(nbest) <= 3 and nbest[0]["text"] == r["text"], r
    assert all(a["score"] >= b["score"] for a, b in zip(nbest, nbest[1:]))
    assert len({h["text"] for h in nbest}) == len(nbest)
# Batched (a.wav with b.wav, c.wav with a file that failed) equals one file per pass.
one = [json.loads(l) for l in open(f"{out}/one.jsonl")]
for a, b in zip([rows[0], rows[2], rows[3]], one):
    assert a["text"] == b["text"] and abs(a["score"] - b["score"]) < 1e-4, (a, b)
# Greedy search: the collapsed argmax path of the CTC log-probabilities `attnzoo encode` writes.
lp = load_file(f"{out}/e.safetensors")["log_probs_0"]
path = lp.argmax(axis=1)
tokens = [words[k] for k, _ in itertools.groupby(path) if k != 0]
greedy = json.loads(open(f"{out}/greedy.jsonl").read())
assert greedy["text"] == " ".join(tokens), (greedy["text"], tokens)
assert abs(greedy["score"] - float(lp[np.arange(len(path)), path].astype(np.float64).sum())) < 1e-3
print("json ok:", rows[0]["text"], "| greedy:", greedy["text"])
PY
    ;;
  transcribe_live)
    # The config streams in chunks of 4 with 2 chunks of history, and its offline forward applies
    # the same chunk mask: the live final result equals the offline one, and --stream (each file
    # chunk by chunk through the caches) too.
    for f in a b c; do
      run 0 transcribe --model "$yaml" "${words[@]}" --json --live --block-ms 130 "$out/$f.wav"
      cp "$out/stdout" "$out/live_$f.jsonl"
      run 0 transcribe --model "$yaml" "${words[@]}" --json "$out/$f.wav"
      cp "$out/stdout" "$out/offline_$f.jsonl"
      run 0 transcribe --model "$yaml" "${words[@]}" --json --stream "$out/$f.wav"
      cp "$out/stdout" "$out/stream_$f.jsonl"
    done
    "$py" - "$out" <<'PY' || exit 1
import json, sys
out = sys.argv[1]
for f in "abc":
    live = [json.loads(l) for l in open(f"{out}/live_{f}.jsonl")]
    offline = json.loads(open(f"{out}/offline_{f}.jsonl").read())
    stream = json.loads(open(f"{out}/stream_{f}.jsonl").read())
    final = live[-1]
    assert final.get("final") is True, final
    for other in (offline, stream):
        assert final["text"] == other["text"], (final["text"], other["text"])
        assert abs(final["score"] - other["score"]) < 1e-4, (final["score"], other["score"])
    # Partials: printed when the stable text grew; each extends the one before, the best
    # hypothesis begins with it, and the final result begins with the last.
    partials = live[:-1]
    seen = []
    for p in partials:
        stable, best = p["partial"].split(), p["best"].split()
        assert stable[:len(seen)] == seen and len(stable) > len(seen), (seen, stable)
        assert best[:len(stable)] == stable, (stable, best)
        seen = stable
    assert final["text"].split()[:len(seen)] == seen
    assert all(a["at"] < b["at"] for a, b in zip(partials, partials[1:]))
    print(f, len(partials), "partials; final:", final["text"])
PY
    run 0 transcribe --model "$yaml" "${words[@]}" --live --block-ms 130 "$out/a.wav"
    expect stdout "^$out/a.wav \[[0-9.]+ s\] [a-z<> ]+$"
    expect stdout "^$out/a.wav \(2.20 s, [0-9.]+ ms, confidence [0-9.]+\): "
    ;;
  transcribe_bad)
    refused 1 'no token table: add decoding.units to its YAML, or give one \(--units FILE' \
      transcribe --model "$yaml" "$out/a.wav"
    printf '<blank> 0\n<unk> 1\nalpha 2\nbravo 2\n' >"$out/dup.txt"
    refused 1 "dup.txt:4: duplicate id 2 \(line 3 has it too\)" \
      transcribe --model "$yaml" --units "$out/dup.txt" "$out/a.wav"
    printf '<blank> 0\n<unk> 1\nalpha 9\n' >"$out/past.txt"
    refused 1 "past.txt:3: id 9 of 'alpha' is past the table's size" \
      transcribe --model "$yaml" --units "$out/past.txt" "$out/a.wav"
    printf '<blank> 0\n<unk> 1\nalpha 2\n' >"$out/small.txt"
    refused 1 "small.txt: 3 tokens, but the CTC head has 7 outputs" \
      transcribe --model "$yaml" --units "$out/small.txt" "$out/a.wav"
    refused 1 'decoding: a decoding section needs a CTC or transducer head \(architecture.vocab_size > 0\)' \
      transcribe --model "$data/conformer_micro_torchaudio.yaml" --units "$out/units.txt" "$out/a.wav"
    refused 1 "override 'decoding.nbest=20'.*nbest 20 exceeds beam_size 10" \
      transcribe --model "$yaml" "${words[@]}" --nbest 20 "$out/a.wav"
    refused 2 'excludes' transcribe --model "$yaml" "${words[@]}" --greedy --beam 4 "$out/a.wav"
    refused 2 'units' transcribe --model "$yaml" --units "$out/none.txt" "$out/a.wav"
    refused 1 'decoding.text: expected one of characters, words, sentencepiece' \
      transcribe --model "$yaml" --units "$out/units.txt" --set decoding.text=letters "$out/a.wav"
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
