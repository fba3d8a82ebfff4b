"""Writes the references of tests/decoding/ into OUT_DIR (a CTest fixture, in the build tree).

  beam_cases.json    random CTC log-probabilities (seeds, T up to 100, V 10..40, peaky and flat)
                     and the n-best of flashlight-text's LexiconFreeDecoder (the decoder inside
                     torchaudio's ctc_decoder) with a ZeroLM, log_add and no score threshold, which
                     is a CTC prefix beam search whose beam holds (prefix, ending) states; with the
                     exact log P(tokens) of each of its hypotheses from torch's ctc_loss (float64)
  oracle_cases.json  tiny T and V: every label sequence with its exact log P from a float64
                     enumeration of all V^T alignments, and its best alignment's token runs
  greedy_cases.json  numpy's argmax path, collapsed: tokens, best-path score, runs
  units/             a WeNet units.txt, an ESPnet tokens.txt and a SentencePiece BPE model trained
                     here (the `sentencepiece` package), with id sequences and their text as
                     sentencepiece itself decodes it (units_cases.json); and tables of characters
                     (WeNet's with "▁", ESPnet's with "<space>", Chinese without a space), of words
                     and the BPE model's, with texts and their ids (tokenizer_cases.json)
  error_rate_cases.json  reference and hypothesis texts (single pairs and corpora) with jiwer's
                     wer and cer and its hit, substitution, deletion and insertion counts

usage: make_reference.py OUT_DIR
"""
import itertools
import json
import re
import sys
from pathlib import Path

import jiwer
import numpy as np
import sentencepiece as spm
import torch
from flashlight.lib.text.decoder import (CriterionType, LexiconFreeDecoder,
                                         LexiconFreeDecoderOptions, ZeroLM)


def log_probs(rng, frames, vocab, kind, blank):
    """float32 log_softmax rows. peaky: each frame has one dominant token (blank 60% of the time),
    as a trained CTC model gives; flat: small logits, many near-equal tokens; saturated: the
    dominant token's probability within a few float32 steps of 1, through torch's float32
    log_softmax as a model computes it, so that about half the rows' probabilities, summed in
    float32's values, pass 1 before their last tokens (a confident trained model's frames)."""
    if kind == "flat":
        logits = rng.normal(0.0, 0.5, size=(frames, vocab))
    elif kind == "saturated":
        logits = rng.normal(0.0, 1.0, size=(frames, vocab))
        for t in range(frames):
            k = blank if rng.random() < 0.6 else int(rng.integers(vocab))
            logits[t, k] += rng.uniform(14.0, 20.0)
        return torch.log_softmax(torch.tensor(logits, dtype=torch.float32), -1).numpy()
    else:
        logits = rng.normal(0.0, 1.0, size=(frames, vocab))
        for t in range(frames):
            k = blank if rng.random() < 0.6 else int(rng.integers(vocab))
            logits[t, k] += rng.uniform(3.0, 8.0)
    logits = logits - logits.max(axis=1, keepdims=True)
    out = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return out.astype(np.float32)


def flashlight_nbest(lp, blank, beam, top_k):
    frames, vocab = lp.shape
    options = LexiconFreeDecoderOptions(
        beam_size=beam, beam_size_token=top_k if top_k > 0 else vocab, beam_threshold=1e30,
        lm_weight=0.0, sil_score=0.0, log_add=True, criterion_type=CriterionType.CTC)
    # The silence token is the blank: flashlight starts every hypothesis on the silence token
    # and treats a first emission equal to it as a repeat, which would swallow a real token.
    decoder = LexiconFreeDecoder(options, ZeroLM(), blank, blank, [])
    data = np.ascontiguousarray(lp)
    results = decoder.decode(data.ctypes.data, frames, vocab)
    hyps = []
    for r in results:
        # r.tokens: one token per frame, between the start and the end state's silence.
        path = list(r.tokens[1:-1])
        tokens = [k for k, _ in itertools.groupby(path) if k != blank]
        hyps.append({"tokens": tokens, "score": r.score})
    return hyps


def exact_log_prob(lp, tokens, blank):
    """log P(tokens) summed over every alignment: -ctc_loss in float64."""
    x = torch.from_numpy(lp.astype(np.float64)).unsqueeze(1)  # [T, 1, V]
    if len(tokens) == 0:
        return float(x[:, 0, blank].sum())
    targets = torch.tensor([tokens], dtype=torch.long)
    loss = torch.nn.functional.ctc_loss(x, targets, torch.tensor([lp.shape[0]]),
                                        torch.tensor([len(tokens)]), blank=blank,
                                        reduction="sum", zero_infinity=False)
    return -float(loss)


def runs_of(path, blank):
    runs = []
    for k, group in itertools.groupby(enumerate(path), key=lambda p: p[1]):
        frames = [t for t, _ in group]
        if k != blank:
            runs.append({"token": int(k), "start": frames[0], "end": frames[-1]})
    return runs


def beam_cases():
    cases = []
    for seed in range(12):
        rng = np.random.default_rng(1000 + seed)
        frames = [1, 2, 7, 31, 64, 100][seed % 6]
        vocab = [10, 17, 29, 40][seed % 4]
        for kind in ("peaky", "flat", "saturated"):
            blank = 0 if seed % 3 else vocab - 1
            lp = log_probs(rng, frames, vocab, kind, blank)
            for beam in (1, 2, 3, 5, 8, 16):
                for top_k in (0, 4):
                    hyps = flashlight_nbest(lp, blank, beam, top_k)
                    for h in hyps:
                        h["exact"] = exact_log_prob(lp, h["tokens"], blank)
                    cases.append({
                        "name": f"seed{seed}_{kind}_T{frames}_V{vocab}_beam{beam}_topk{top_k}",
                        "frames": frames, "vocab": vocab, "blank": blank, "beam": beam,
                        "top_k": top_k, "kind": kind, "log_probs": lp.flatten().tolist(),
                        "flashlight": hyps})
    return cases


def oracle_cases():
    cases = []
    rng = np.random.default_rng(7)
    for frames, vocab in [(1, 2), (2, 3), (3, 2), (4, 3), (5, 3), (6, 4), (5, 4), (7, 3)]:
        for kind in ("peaky", "flat"):
            blank = int(rng.integers(vocab))
            lp = log_probs(rng, frames, vocab, kind, blank)
            lp64 = lp.astype(np.float64)
            total, best = {}, {}
            for path in itertools.product(range(vocab), repeat=frames):
                score = float(sum(lp64[t, k] for t, k in enumerate(path)))
                label = tuple(k for k, _ in itertools.groupby(path) if k != blank)
                total[label] = np.logaddexp(total.get(label, -np.inf), score)
                if label not in best or score > best[label][0]:
                    best[label] = (score, path)
            prefixes = sorted(total, key=lambda l: -total[l])
            cases.append({
                "name": f"oracle_{kind}_T{frames}_V{vocab}", "frames": frames, "vocab": vocab,
                "blank": blank, "log_probs": lp.flatten().tolist(),
                "prefixes": [{"tokens": list(l), "score": float(total[l]),
                              "best_runs": runs_of(best[l][1], blank)} for l in prefixes]})
    return cases


def greedy_cases():
    cases = []
    for seed in range(10):
        rng = np.random.default_rng(2000 + seed)
        frames = [1, 5, 33, 100, 250][seed % 5]
        vocab = [10, 40][seed % 2]
        blank = [0, vocab - 1][seed % 2]
        lp = log_probs(rng, frames, vocab, "peaky" if seed % 3 else "flat", blank)
        if seed == 9:
            lp[3:6] = lp[2]  # equal rows: a run across frames of the same token
        path = lp.argmax(axis=1)
        tokens = [int(k) for k, _ in itertools.groupby(path) if k != blank]
        score = float(lp.astype(np.float64)[np.arange(frames), path].sum())
        cases.append({"frames": frames, "vocab": vocab, "blank": blank,
                      "log_probs": lp.flatten().tolist(), "tokens": tokens, "score": score,
                      "runs": runs_of(path, blank)})
    return cases


WORDS = ("the quick brown fox jumps over lazy dog speech model encoder decoder beam search "
         "prefix token alignment frame blank label sequence probability attention conformer "
         "vision transformer zoo library").split()


def units_files(out):
    rng = np.random.default_rng(3)
    out.mkdir(parents=True, exist_ok=True)
    cases = {}
    # WeNet: characters (Chinese and Latin), lines in a shuffled order (ids decide, not lines).
    chars = list("你好世界语音识别模型abcxyz") + ["▁hello", "'"]
    wenet = ["<blank>", "<unk>"] + chars + ["<sos/eos>"]
    lines = [f"{tok} {i}" for i, tok in enumerate(wenet)]
    order = rng.permutation(len(lines))
    (out / "units.txt").write_text("\n".join(lines[i] for i in order) + "\n", encoding="utf-8")
    seqs = [rng.integers(0, len(wenet), size=n).tolist() for n in (0, 1, 5, 20)]
    specials = {0, len(wenet) - 1}
    cases["wenet"] = {"size": len(wenet), "tokens": wenet, "sequences": [
        {"ids": s, "text": "".join(wenet[i] for i in s if i not in specials)} for s in seqs]}
    # ESPnet: one token per line, CRLF line ends on purpose.
    espnet = ["<blank>", "<unk>"] + list("abcdefgh") + ["▁", "<sos/eos>"]
    (out / "tokens.txt").write_bytes(("\r\n".join(espnet) + "\r\n").encode("utf-8"))
    cases["espnet"] = {"size": len(espnet), "tokens": espnet}
    # SentencePiece BPE trained on a small text, its vocabulary as ESPnet's token list has it.
    text = out / "spm_train.txt"
    sentences = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 9)))) for _ in range(400)]
    text.write_text("\n".join(sentences) + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(out / "bpe"), vocab_size=80,
                                   model_type="bpe", character_coverage=1.0, bos_id=-1,
                                   eos_id=-1, unk_id=0, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(out / "bpe.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
              if not (sp.is_control(i) or sp.is_unknown(i))]
    token_list = ["<blank>", "<unk>"] + pieces + ["<sos/eos>"]
    (out / "bpe_tokens.txt").write_text("\n".join(token_list) + "\n", encoding="utf-8")
    ctc_of_piece = {p: i for i, p in enumerate(token_list)}
    sp_cases = []
    for sentence in sentences[:20] + ["  leading and  double spaces "]:
        encoded = sp.encode(sentence, out_type=str)
        sp_cases.append({"ids": [ctc_of_piece[p] for p in encoded],
                         "model_ids": sp.encode(sentence),
                         "text": sp.decode_pieces(encoded), "sentence": sentence})
    for n in (1, 2, 7, 30):  # random pieces: leading "▁" pieces, words glued together
        ids = rng.integers(2, len(token_list) - 1, size=n).tolist()
        chosen = [token_list[i] for i in ids]
        sp_cases.append({"ids": ids, "model_ids": [sp.piece_to_id(p) for p in chosen],
                         "text": sp.decode_pieces(chosen)})
    cases["sentencepiece"] = {"size": len(token_list), "model_size": sp.get_piece_size(),
                              "pieces": [sp.id_to_piece(i) for i in range(sp.get_piece_size())],
                              "sequences": sp_cases}
    (out / "units_cases.json").write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    tokenizer_files(out, sp, token_list, sentences)


# decoding/tokenizer.h's white space: ASCII only (Python's str.split() would take Unicode's too).
WHITE = " \t\n\r\v\f"


def spaced(rng, words):
    """words joined by runs of white space, sometimes with white space at the ends."""
    gaps = [str(rng.choice([" ", " ", " ", "  ", "\t", " \n "])) for _ in words]
    text = "".join(g + w for g, w in zip(gaps, words))[len(gaps[0]):] if words else ""
    if rng.random() < 0.3:
        text = "  " + text
    if rng.random() < 0.3:
        text = text + " \t"
    return text


def char_tokens(text, space):
    """The toolkits' character tokenizers (ESPnet's CharTokenizer, WeNet's char_tokenizer: each
    character a token, " " as the space symbol) on the text with its white space normalised as
    decoding/tokenizer.h documents: ends dropped, each run one space, no token without a space
    symbol."""
    tokens = []
    for word in re.split(f"[{WHITE}]+", text.strip(WHITE)):
        if not word:
            continue
        if tokens and space is not None:
            tokens.append(space)
        tokens.extend(word)
    return tokens


def tokenizer_files(out, sp, bpe_tokens, sentences):
    """Token tables and texts with the ids the toolkits' tokenizers give them, for
    decoding/tokenizer.h. Every table has <unk>, so a token it lacks is <unk>'s id."""
    rng = np.random.default_rng(11)
    letters = list("abcdefghijklmnopqrstuvwxyz'")
    chinese = list("你好世界语音识别模型的是")
    tables = {
        # WeNet's lang_char.txt of an English or mixed model: "▁" is the space.
        "wenet_chars": ("wenet", "characters", ["▁"] + letters + chinese),
        # ESPnet's token_list of a char model: "<space>" is the space.
        "espnet_chars": ("espnet", "characters", ["<space>"] + letters),
        # A Chinese character table: no space token, spaces are dropped.
        "chinese_chars": ("wenet", "characters", chinese),
        "words": ("wenet", "words", sorted(set(WORDS))),
    }
    texts = {
        "latin": [spaced(rng, list(rng.choice(WORDS, size=int(rng.integers(1, 8)))))
                  for _ in range(12)]
                 + ["a", "don't stop", "  lead", "trail  ", " \t both \n ", "x  y   z", "",
                    "   ", "Quick Fox", "naïve café", "smile 🙂 now", "a\tb\nc"],
        "chinese": ["你好世界", "你好 世界", "  语音  识别 模型 ", "你好，世界", "中文", "你a好"],
    }
    description = {}
    for name, (layout, join, tokens) in tables.items():
        table = ["<blank>", "<unk>"] + tokens + ["<sos/eos>"]
        path = out / f"{name}.txt"
        if layout == "wenet":
            lines = [f"{token} {i}" for i, token in enumerate(table)]
        else:
            lines = table
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        id_of = {token: i for i, token in enumerate(table)}
        space = {"wenet_chars": "▁", "espnet_chars": "<space>"}.get(name)
        cases = []
        for text in texts["latin"] + texts["chinese"]:
            if join == "words":
                pieces = [w for w in re.split(f"[{WHITE}]+", text) if w]
            else:
                pieces = char_tokens(text, space)
            ids = [id_of.get(p, 1) for p in pieces]
            decoded = [table[i] for i in ids]
            if join == "words":
                text_of_ids = " ".join(decoded)
            else:
                text_of_ids = "".join(" " if t == space else t for t in decoded).strip(" ")
            cases.append({"text": text, "ids": ids, "decoded": text_of_ids,
                          "unknown": 1 in ids})
        description[name] = {"file": path.name, "layout": layout, "join": join,
                             "size": len(table), "cases": cases}
    # The BPE model's pieces as its ESPnet token list numbers them: sentencepiece's own encoding,
    # a piece the list lacks as <unk>, decoded by the model.
    id_of = {token: i for i, token in enumerate(bpe_tokens)}
    cases = []
    for text in sentences[20:40] + texts["latin"] + ["Zebra jumps", "  the   fox  "]:
        pieces = sp.encode(text.strip(WHITE), out_type=str)
        ids = [id_of.get(p, 1) for p in pieces]
        cases.append({"text": text, "ids": ids,
                      "decoded": sp.decode_pieces([bpe_tokens[i] for i in ids]),
                      "unknown": 1 in ids})
    description["sentencepiece"] = {"file": "bpe_tokens.txt", "model": "bpe.model",
                                    "layout": "espnet", "join": "sentencepiece",
                                    "size": len(bpe_tokens), "cases": cases}
    (out / "tokenizer_cases.json").write_text(json.dumps(description, ensure_ascii=False),
                                              encoding="utf-8")


CHINESE_WORDS = ["你好", "世界", "语音", "识别", "模型", "的", "是", "中文"]


def edited(rng, words, vocabulary, rate):
    """words with each one substituted, deleted or followed by an insertion at about `rate`."""
    out = []
    for w in words:
        r = rng.random()
        if r < rate:
            out.append(str(rng.choice(vocabulary)))
        elif r < 2 * rate:
            pass
        else:
            out.append(w)
        if rng.random() < rate:
            out.append(str(rng.choice(vocabulary)))
    return out


def jiwer_counts(reference, hypothesis):
    w = jiwer.process_words(reference, hypothesis)
    c = jiwer.process_characters(reference, hypothesis)
    return {
        "wer": float(w.wer), "cer": float(c.cer),
        "words": {"hits": w.hits, "substitutions": w.substitutions, "deletions": w.deletions,
                  "insertions": w.insertions},
        "characters": {"hits": c.hits, "substitutions": c.substitutions,
                       "deletions": c.deletions, "insertions": c.insertions}}


def error_rate_cases():
    """Pairs and corpora with jiwer's measures. White space in them is the space only: jiwer's
    default transforms split words at " " alone (a single tab stays inside a word)."""
    rng = np.random.default_rng(5)
    pairs = [
        ("the cat sat on the mat", "the cat sat on the mat"),
        ("the cat sat", "the dog sat"),            # one substitution, not a deletion + insertion
        ("a b c d", "b c d e"),                    # a deletion and an insertion
        ("the quick brown fox", ""),               # empty hypothesis: all deleted
        ("  the   quick brown  ", "the quick  brown fox "),  # extra spaces
        ("the the the the", "the the"),           # repeated words
        ("the the the", "the the the the the"),
        ("abc abc", "abd abc abc"),
        ("你好世界", "你好世届"),                   # Chinese: one word, four characters
        ("你好 世界 语音 识别", "你好 世界 识别 模型"),
        ("语音识别模型", "语音 识别模型的"),
        ("naïve café", "naive cafe"),
        ("🙂 smile", "smile 🙂"),
        ("a", "b c d e f"),                        # more errors than reference words
        ("x", "x"),
    ]
    for n in range(40):
        chinese = n % 5 == 4
        vocabulary = CHINESE_WORDS if chinese else list(WORDS)
        words = [str(w) for w in rng.choice(vocabulary, size=int(rng.integers(1, 25)))]
        if n % 7 == 3:
            words = words[:2] * 4  # repeated words
        hypothesis = edited(rng, words, vocabulary, [0.0, 0.05, 0.15, 0.3, 0.6][n % 5])
        if n % 11 == 10:
            hypothesis = []
        join = "" if chinese and n % 2 else " "
        pairs.append((spaced(rng, words).replace("\t", " ").replace("\n", " ")
                      if join == " " else join.join(words), " ".join(hypothesis)))
    cases = [dict(reference=r, hypothesis=h, **jiwer_counts(r, h)) for r, h in pairs]
    corpora = []
    for n, size in enumerate((2, 5, 12, 30)):
        chosen = rng.choice(len(pairs), size=size, replace=False)
        references = [pairs[i][0] for i in chosen]
        hypotheses = [pairs[i][1] for i in chosen]
        corpora.append(dict(references=references, hypotheses=hypotheses,
                            **jiwer_counts(references, hypotheses)))
    # Empty references: jiwer's "wer" is then the number of insertions, where error_rate.h says
    # +inf (and 0 for two empty texts).
    empty = [dict(reference=r, hypothesis=h, **jiwer_counts(r, h))
             for r, h in [("", ""), ("", "a b"), ("   ", "你好")]]
    corpora.append(dict(references=["a b", ""], hypotheses=["a b", "c"],
                        **jiwer_counts(["a b", ""], ["a b", "c"])))
    return {"pairs": cases, "corpora": corpora, "empty_references": empty}


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "beam_cases.json").write_text(json.dumps(beam_cases()))
    (out / "oracle_cases.json").write_text(json.dumps(oracle_cases()))
    (out / "greedy_cases.json").write_text(json.dumps(greedy_cases()))
    units_files(out / "units")
    (out / "error_rate_cases.json").write_text(json.dumps(error_rate_cases(), ensure_ascii=False),
                                               encoding="utf-8")


if __name__ == "__main__":
    main()
