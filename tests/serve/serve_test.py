#!/usr/bin/env python3
"""`attnzoo serve` as its users meet it, on loopback, one scenario per CTest entry:

  tritonclient  Triton's own Python client (tritonclient[http]): health, server and model
                metadata, infer with JSON and with binary tensors, the classification extension,
                errors; the logits against timm's VisionTransformer with the same weights.
  curl          the file route with curl, against `attnzoo classify --json` on the same file.
  bad_requests  malformed JSON, a wrong datatype and shape, a 2 GB Content-Length, a chunked
                body past the limit, an oversized header, a corrupt image, garbage instead of
                HTTP: each a 4xx with a JSON error, and the server still answers after them.
  slow_client   one byte a second and a silent connection: cut at the request deadline, while
                another client is served meanwhile.
  queue_full    a queue of 2 under 24 concurrent requests: 503 with Retry-After for the
                refused, 200 for the rest, the refusals counted in /metrics.
  shutdown      SIGTERM with requests queued: every one answered 200, exit status 0.
  load          a short load with dynamic batching: no error, no answer different from the same
                input's answer alone (tools/scripts/load_test.py).
  contention    the default settings beside a process that keeps one core busy: every request
                answered within 1 s, p99 within 3 times the quiet p99 (+ 10 ms), the server's
                own wait policy in its environment.
  speech        the shipped recognizer, keyword classifier and an encoder through tritonclient
                and curl: audio files and waveforms, against `attnzoo transcribe` and
                `attnzoo classify` on the same files; concurrent requests of different lengths
                (batched) against each alone; audio it cannot take.
  stream        live speech over a WebSocket with aiohttp's client, in WeNet's protocol: the
                final result against `attnzoo transcribe --live`, the stable text only growing,
                an encoder's frames, max_streams, a protocol error, SIGTERM with a stream open.
  wenet_folder  a WeNet U2++ experiment folder as the model: /transcribe and the WebSocket's
                final result rescored by the attention decoder, as `attnzoo transcribe` on the
                folder, on sounds where rescoring changes the answer.

usage: serve_test.py CASE ATTNZOO REPO_ROOT
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

CASE, ATTNZOO, REPO = sys.argv[1], sys.argv[2], Path(sys.argv[3]).resolve()
sys.path.insert(0, str(REPO / "tools" / "scripts"))
sys.path.insert(0, str(REPO / "tests" / "cli"))
import load_test  # noqa: E402

DIGITS_WEIGHTS = REPO / "assets" / "weights" / "vit_digits.safetensors"
DIGIT_IMAGE = REPO / "assets" / "samples" / "digit_7.png"
ASR_WEIGHTS = REPO / "assets" / "weights" / "conformer_digits_ctc.safetensors"
KWS_WEIGHTS = REPO / "assets" / "weights" / "conformer_kws.safetensors"
DIGITS_WAV = REPO / "assets" / "samples" / "digits_417.wav"
STOP_WAV = REPO / "assets" / "samples" / "keyword_stop.wav"

# The shipped recognizer (streaming in chunks of 16 frames), the same model as an encoder, and the
# keyword classifier.
SPEECH_CONFIG = f"""
threads: 2
stream_threads: 2
models:
  - name: digits
    model: conformer_digits_ctc
    weights: {ASR_WEIGHTS}
    dynamic_batching: {{max_queue_delay_us: 20000}}
    stream_chunk: 16
    max_streams: 2
  - name: digits_encoder
    model: conformer_digits_ctc
    weights: {ASR_WEIGHTS}
    task: encode
    dynamic_batching: {{max_queue_delay_us: 100000}}
    stream_chunk: 16
  - name: kws
    model: conformer_kws
    weights: {KWS_WEIGHTS}
"""


def wav_samples(path):
    """A 16-bit mono WAV's samples as float32 in [-1, 1] (libsndfile's scaling) and its rate."""
    import wave
    with wave.open(str(path)) as w:
        check(w.getsampwidth() == 2 and w.getnchannels() == 1, f"{path}: not 16-bit mono")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return pcm.astype(np.float32) / 32768.0, w.getframerate()


def fail(message):
    print(f"serve_test.py {CASE}: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


class Server:
    """`attnzoo serve ARGS --port 0` (load_test.ServeProcess) until the end of the with-block,
    then SIGTERM; its exit status must be 0."""

    def __init__(self, *args, config=None, env=None):
        self.args = list(args)
        self.config = config
        self.env = env

    def __enter__(self):
        if self.config is not None:
            self.config_file = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
            self.config_file.write(self.config)
            self.config_file.close()
            self.args += ["--config", self.config_file.name]
        self.serve = load_test.ServeProcess(ATTNZOO, self.args, env=self.env)
        if not self.serve.started():
            fail(f"the server did not start: {''.join(self.serve.output)}")
        self.process, self.port, self.output = self.serve.process, self.serve.port, self.serve.output
        return self

    def stop(self, expect_status=0):
        status = self.serve.stop()
        check(status is not None, "the server did not exit within 60 s of SIGTERM")
        check(status == expect_status,
              f"exit status {status}, expected {expect_status}: {''.join(self.output)}")

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.stop()
        else:
            self.process.kill()
        if self.config is not None:
            os.unlink(self.config_file.name)


def request(port, method, path, body=None, headers=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, dict(response.getheaders()), data


def raw_exchange(port, payload, timeout=10):
    """Sends raw bytes; returns what the server answered before closing (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        received = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                received += chunk
                if b"\r\n\r\n" in received and b"Content-Length" in received:
                    head, _, rest = received.partition(b"\r\n\r\n")
                    length = int(re.search(rb"Content-Length: *([0-9]+)", head).group(1))
                    if len(rest) >= length:
                        break
        except socket.timeout:
            pass
    return received


def status_of(raw):
    match = re.match(rb"HTTP/1\.[01] ([0-9]{3})", raw)
    return int(match.group(1)) if match else None


def json_error(raw_or_body):
    body = raw_or_body.partition(b"\r\n\r\n")[2] if raw_or_body.startswith(b"HTTP/") else raw_or_body
    return json.loads(body)["error"]


def timm_digits():
    """timm's VisionTransformer with vit_digits' architecture and shipped weights."""
    import torch
    import yaml
    from safetensors.torch import load_file
    from timm.models.vision_transformer import VisionTransformer
    from make_forward_reference import timm_kwargs
    config = yaml.safe_load((REPO / "configs" / "vit" / "vit_digits.yaml").read_text())
    model = VisionTransformer(**timm_kwargs(config["architecture"])).eval()
    state = {k: v.float() for k, v in load_file(str(DIGITS_WEIGHTS)).items()}
    model.load_state_dict(state, strict=True)
    return model


def case_tritonclient():
    import torch
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException
    with Server("--model", "vit_digits", "--weights", str(DIGITS_WEIGHTS),
                "--max-queue-delay-us", "1000") as server:
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")
        check(client.is_server_live() and client.is_server_ready(), "not live and ready")
        check(client.is_model_ready("vit_digits"), "model not ready")
        check(not client.is_model_ready("vit_nope"), "an unknown model is ready")
        metadata = client.get_server_metadata()
        check(metadata["name"] == "attnzoo" and "binary_tensor_data" in metadata["extensions"],
              f"server metadata {metadata}")
        model = client.get_model_metadata("vit_digits")
        check({i["name"]: i["shape"] for i in model["inputs"]} ==
              {"image": [-1, 1], "pixels": [-1, 3, 32, 32]}, f"inputs {model['inputs']}")
        check({o["name"]: (o["datatype"], o["shape"]) for o in model["outputs"]} ==
              {"logits": ("FP32", [-1, 10]), "probabilities": ("FP32", [-1, 10])},
              f"outputs {model['outputs']}")

        rng = np.random.default_rng(0)
        pixels = rng.standard_normal((3, 3, 32, 32), dtype=np.float32)
        with torch.no_grad():
            expected = timm_digits()(torch.from_numpy(pixels)).numpy()
        answers = {}
        for binary in (False, True):
            x = httpclient.InferInput("pixels", list(pixels.shape), "FP32")
            x.set_data_from_numpy(pixels, binary_data=binary)
            out = [httpclient.InferRequestedOutput("logits", binary_data=binary),
                   httpclient.InferRequestedOutput("probabilities", binary_data=binary)]
            result = client.infer("vit_digits", [x], outputs=out, request_id=f"r{int(binary)}")
            check(result.get_response()["id"] == f"r{int(binary)}", "request id not echoed")
            logits = result.as_numpy("logits")
            check(logits.shape == (3, 10), f"logits shape {logits.shape}")
            diff = float(np.abs(logits - expected).max())
            print(f"binary={binary}: max |attnzoo - timm| logits {diff:.2e}")
            check(diff < 1e-4, f"logits differ from timm's by {diff}")
            probabilities = result.as_numpy("probabilities")
            check(np.allclose(probabilities, torch.softmax(torch.from_numpy(expected), 1).numpy(),
                              atol=1e-5), "probabilities are not softmax(logits)")
            answers[binary] = logits
        check(np.array_equal(answers[False], answers[True]),
              "JSON and binary tensors gave different logits")

        # An encoded image as BYTES, the classification extension on probabilities.
        image = httpclient.InferInput("image", [1, 1], "BYTES")
        image.set_data_from_numpy(np.array([[DIGIT_IMAGE.read_bytes()]], dtype=np.object_))
        result = client.infer("vit_digits", [image], outputs=[
            httpclient.InferRequestedOutput("probabilities", class_count=3)])
        top = result.as_numpy("probabilities")
        check(top.shape == (1, 3), f"classification shape {top.shape}")
        value, index, label = top[0][0].decode().split(":")
        print(f"digit_7.png: {top[0].tolist()}")
        check(index == "7" and label == "7" and float(value) > 0.5,
              f"digit_7.png classified as {top[0][0]!r}")

        def refused(call, status, fragment):
            try:
                call()
            except InferenceServerException as e:
                check(e.status() == str(status), f"status {e.status()} ({e.message()}), "
                                                 f"expected {status}")
                check(fragment in e.message(), f"message {e.message()!r} lacks {fragment!r}")
                return
            fail(f"accepted; expected {status} {fragment}")

        x16 = httpclient.InferInput("pixels", [1, 3, 32, 32], "FP16")
        x16.set_data_from_numpy(pixels[:1].astype(np.float16))
        refused(lambda: client.infer("vit_digits", [x16]), 400, "must be FP32 [N, 3, 32, 32]")
        small = httpclient.InferInput("pixels", [1, 3, 16, 16], "FP32")
        small.set_data_from_numpy(np.zeros((1, 3, 16, 16), np.float32))
        refused(lambda: client.infer("vit_digits", [small]), 400, "got FP32 [1, 3, 16, 16]")
        refused(lambda: client.infer("vit_nope", [small]), 404, "unknown model 'vit_nope'")
        refused(lambda: client.infer("vit_digits", [x], outputs=[
            httpclient.InferRequestedOutput("scores")]), 400, "unknown output 'scores'")
        refused(lambda: client.get_model_metadata("vit_digits", model_version="9"), 404,
                "has no version '9'")
        corrupt = httpclient.InferInput("image", [1, 1], "BYTES")
        corrupt.set_data_from_numpy(np.array([[DIGIT_IMAGE.read_bytes()[:50]]], dtype=np.object_))
        refused(lambda: client.infer("vit_digits", [corrupt]), 400, "input 'image'[0]")
        client.close()


def case_curl():
    with Server("--model", "vit_digits", "--weights", str(DIGITS_WEIGHTS)) as server:
        url = f"http://127.0.0.1:{server.port}"
        ready = subprocess.run(["curl", "-sf", f"{url}/v2/health/ready"])
        check(ready.returncode == 0, "curl -f /v2/health/ready failed")
        out = subprocess.run(["curl", "-s", "--data-binary", f"@{DIGIT_IMAGE}",
                              f"{url}/v2/models/vit_digits/classify?top=5"],
                             capture_output=True, text=True, check=True).stdout
        print(out)
        served = json.loads(out)
        local = json.loads(subprocess.run(
            [ATTNZOO, "classify", "--model", "vit_digits", "--weights", str(DIGITS_WEIGHTS),
             "--topk", "5", "--json", str(DIGIT_IMAGE)],
            capture_output=True, text=True, check=True).stdout)
        check([p["index"] for p in served["predictions"]] == [p["index"] for p in local["top"]],
              f"served {served} vs classify {local}")
        check([p["label"] for p in served["predictions"]] == [p["label"] for p in local["top"]],
              "labels differ")
        diff = max(abs(a["prob"] - b["prob"]) for a, b in zip(served["predictions"], local["top"]))
        check(diff < 1e-6, f"probabilities differ by {diff}")
        bad = subprocess.run(["curl", "-s", "-w", "%{http_code}", "--data-binary", "not an image",
                              f"{url}/v2/models/vit_digits/classify"],
                             capture_output=True, text=True)
        check(bad.stdout.endswith("400") and '"error"' in bad.stdout, f"corrupt file: {bad.stdout}")


def case_bad_requests():
    config = f"""
http: {{max_body_mb: 1, max_header_kb: 8, request_timeout_s: 10}}
models:
  - model: vit_digits
    weights: {DIGITS_WEIGHTS}
    max_batch_size: 4
    dynamic_batching: {{max_queue_delay_us: 500}}
"""
    with Server(config=config) as server:
        port = server.port
        infer = "/v2/models/vit_digits/infer"

        def expect(status_body, status, fragment):
            got, _, body = status_body
            check(got == status, f"status {got}, expected {status}: {body[:300]!r}")
            check(fragment in json_error(body), f"error {json_error(body)!r} lacks {fragment!r}")

        expect(request(port, "POST", infer, b"{\"inputs\": [}"), 400, "malformed request JSON")
        good = {"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 3, 32, 32],
                            "data": [0.0] * 3072}]}
        wrong_type = dict(good, inputs=[dict(good["inputs"][0], datatype="INT32",
                                             data=[0] * 3072)])
        expect(request(port, "POST", infer, json.dumps(wrong_type)), 400, "must be FP32")
        wrong_shape = dict(good, inputs=[dict(good["inputs"][0], shape=[1, 3, 32, 31])])
        expect(request(port, "POST", infer, json.dumps(wrong_shape)), 400, "holds 2976 elements")
        expect(request(port, "POST", infer, json.dumps(
            dict(good, inputs=[dict(good["inputs"][0], shape=[5, 3, 32, 32],
                                    data=[0.0] * 15360)]))), 400, "more than max_batch_size 4")
        expect(request(port, "POST", "/v2/models/vit_digits/classify", b"\x89PNG\r\n\x1a\n" * 10),
               400, "input 'image'[0]")
        expect(request(port, "GET", "/v2/models/vit_digits/nothing"), 404, "no route")

        # 2 GB announced: refused from the header, without reading the body, at once.
        start = time.monotonic()
        raw = raw_exchange(port, f"POST {infer} HTTP/1.1\r\nHost: x\r\n"
                                 f"Content-Length: {2 << 30}\r\n\r\n{{".encode())
        elapsed = time.monotonic() - start
        check(status_of(raw) == 413, f"2 GB body: {raw[:200]!r}")
        check("larger than the server accepts" in json_error(raw), "413 without its reason")
        check(elapsed < 5, f"the 2 GB refusal took {elapsed:.1f} s")
        # A chunked body past the limit, which no Content-Length announces.
        chunk = b"0" * 65536
        payload = (f"POST {infer} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   .encode() + b"".join(b"10000\r\n" + chunk + b"\r\n" for _ in range(24)) +
                   b"0\r\n\r\n")
        raw = raw_exchange(port, payload)
        check(status_of(raw) == 413, f"chunked body over the limit: {raw[:200]!r}")
        # A header past max_header_kb.
        raw = raw_exchange(port, f"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * 20000}\r\n\r\n"
                           .encode())
        check(status_of(raw) == 431, f"oversized header: {raw[:200]!r}")
        # Not HTTP at all.
        raw = raw_exchange(port, b"HELLO THERE\r\n\r\n")
        check(status_of(raw) == 400, f"garbage: {raw[:200]!r}")
        # The binary extension with a header length past the body.
        expect(request(port, "POST", infer, b"{}",
                       {"Inference-Header-Content-Length": "100"}), 400, "is more than the body")

        # Still serving, correctly.
        status, _, body = request(port, "POST", infer, json.dumps(good))
        check(status == 200, f"a good request after the bad ones: {status} {body[:200]!r}")
        metrics = request(port, "GET", "/metrics")[2].decode()
        invalid = re.search(r'nv_inference_request_failure\{model="vit_digits",version="1",'
                            r'reason="INVALID"\} ([0-9]+)', metrics)
        check(invalid and int(invalid.group(1)) >= 5, f"INVALID failures not counted: {metrics}")
        for code in ("400", "413", "431"):
            check(f'attnzoo_http_responses_total{{code="{code}"}}' in metrics, f"no {code} counted")


def case_slow_client():
    config = f"""
http: {{request_timeout_s: 2}}
models:
  - model: vit_digits
    weights: {DIGITS_WEIGHTS}
"""
    with Server(config=config) as server:
        port = server.port
        # Silent: connected, nothing sent.
        silent = socket.create_connection(("127.0.0.1", port))
        silent.settimeout(10)
        # Slow: a request one byte every half second (it would take a minute).
        slow = socket.create_connection(("127.0.0.1", port))
        message = b"GET /v2/health/live HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100
        start = time.monotonic()
        closed_after = None
        served_meanwhile = False
        for i, byte in enumerate(message):
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - start
                break
            if i == 2:
                served_meanwhile = request(port, "GET", "/v2/health/ready")[0] == 200
            time.sleep(0.5)
            slow.settimeout(0.01)
            try:
                if slow.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except socket.timeout:
                pass
            except OSError:
                closed_after = time.monotonic() - start
                break
        check(closed_after is not None, "the slow client was never disconnected")
        print(f"slow client disconnected after {closed_after:.1f} s")
        check(1.5 <= closed_after <= 5.0, f"slow client cut after {closed_after:.1f} s, deadline 2 s")
        check(served_meanwhile, "another client was not served while the slow one dripped")
        start = time.monotonic()
        check(silent.recv(1) == b"", "the silent connection got data")
        print(f"silent connection closed {time.monotonic() - start:.1f} s after the slow one")
        status, _, _ = request(port, "GET", "/v2/health/live")
        check(status == 200, "not live after the slow clients")


def case_queue_full():
    config = """
threads: 2
models:
  - model: vit_small_patch16_224
    max_batch_size: 1
    max_queue_size: 2
"""
    with Server(config=config) as server:
        rng = np.random.default_rng(1)
        body, headers = load_test.pixels_input(
            rng.standard_normal((1, 3, 224, 224), dtype=np.float32))
        results = []
        lock = threading.Lock()

        def client():
            answer = request(server.port, "POST", "/v2/models/vit_small_patch16_224/infer", body,
                             headers, timeout=120)
            with lock:
                results.append(answer)

        threads = [threading.Thread(target=client) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = [r for r in results if r[0] == 503]
        served = [r for r in results if r[0] == 200]
        print(f"24 requests at once, queue of 2: {len(served)} served, {len(refused)} refused")
        check(len(served) + len(refused) == 24, f"statuses {[r[0] for r in results]}")
        check(len(refused) > 0 and len(served) >= 3, "expected both refusals and answers")
        for status, headers, data in refused:
            check(headers.get("Retry-After") == "1", f"503 without Retry-After: {headers}")
            check("queue is full" in json_error(data), f"503 body {data!r}")
        metrics = request(server.port, "GET", "/metrics")[2].decode()
        check(f'reason="REJECTED"}} {len(refused)}' in metrics, "refusals not counted as REJECTED")


def case_shutdown():
    config = """
threads: 2
models:
  - model: vit_small_patch16_224
    max_batch_size: 4
    dynamic_batching: {max_queue_delay_us: 1000}
"""
    server = Server(config=config)
    with server:
        rng = np.random.default_rng(2)
        body, headers = load_test.pixels_input(
            rng.standard_normal((1, 3, 224, 224), dtype=np.float32))
        results = []
        sent = threading.Semaphore(0)
        lock = threading.Lock()

        def client():
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
            conn.request("POST", "/v2/models/vit_small_patch16_224/infer", body=body,
                         headers=headers)
            sent.release()
            status = conn.getresponse().status
            with lock:
                results.append(status)

        threads = [threading.Thread(target=client) for _ in range(12)]
        for t in threads:
            t.start()
        # Every request sent (in the server's socket buffers), most of them still queued behind
        # the first batches: SIGTERM.
        for _ in threads:
            sent.acquire()
        time.sleep(0.3)
        metrics = request(server.port, "GET", "/metrics")[2].decode()
        pending = re.search(r"nv_inference_pending_request_count\{[^}]*\} ([0-9]+)", metrics)
        print(f"at SIGTERM: {pending.group(1)} requests queued")
        check(int(pending.group(1)) >= 1, "nothing queued at SIGTERM: the case tests nothing")
        server.process.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        server.stop()
        print(f"statuses after SIGTERM: {sorted(results)}")
        check(results == [200] * 12, f"requests received before SIGTERM not all answered: {results}")
        check(any("SIGTERM" in line for line in server.output), "no shutdown message")
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
            fail("still accepting connections after exit")
        except OSError:
            pass


def case_load():
    # The serve config the repository ships (configs/serve/), on a free port.
    with Server("--config", str(REPO / "configs" / "serve" / "vit_digits.yaml")) as server:
        rng = np.random.default_rng(3)
        inputs = [load_test.pixels_input(rng.standard_normal((1, 3, 32, 32), dtype=np.float32))
                  for _ in range(16)]
        inputs.append(load_test.image_input(DIGIT_IMAGE))
        reference = load_test.reference_answers("127.0.0.1", server.port, "vit_digits", inputs)
        figures = load_test.run("127.0.0.1", server.port, "vit_digits", inputs, clients=16,
                                seconds=8, reference=reference, rss_pid=server.process.pid)
        print(json.dumps(figures))
        check(figures["answered"] > 50, f"too few answers: {figures}")
        check(figures["errors"] == 0 and figures["wrong"] == 0, f"errors or wrong: {figures}")
        metrics = request(server.port, "GET", "/metrics")[2].decode()
        batches = re.search(r'attnzoo_inference_batch_size_bucket\{[^}]*le="1"\} ([0-9]+)', metrics)
        executions = re.search(r"nv_inference_exec_count\{[^}]*\} ([0-9]+)", metrics)
        check(int(batches.group(1)) < int(executions.group(1)),
              "no execution held more than one request: dynamic batching did not batch")


def case_contention():
    # The defaults beside a neighbour that keeps a core busy: one LibTorch thread per instance and
    # as many instances as usable cores, idle OpenMP threads sleeping at once (OMP_WAIT_POLICY set
    # by the server itself, the environment saying nothing of it). Every answer within 1 s.
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    with Server("--model", "vit_digits", "--weights", str(DIGITS_WEIGHTS), env=env) as server:
        environ = Path(f"/proc/{server.process.pid}/environ").read_bytes().split(b"\0")
        check(b"OMP_WAIT_POLICY=PASSIVE" in environ,
              "the server did not restart with its wait policy (OMP_WAIT_POLICY=PASSIVE)")
        listening = "".join(server.output)
        check(re.search(r"[0-9]+ instances? x 1 thread,", listening) is not None,
              f"not one thread per instance: {listening}")
        inputs = [load_test.image_input(DIGIT_IMAGE)]
        quiet = load_test.run("127.0.0.1", server.port, "vit_digits", inputs, clients=8, seconds=5)
        busy = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        try:
            figures = load_test.run("127.0.0.1", server.port, "vit_digits", inputs, clients=8,
                                    seconds=8)
        finally:
            busy.kill()
            busy.wait()
        print(json.dumps({"quiet": quiet, "neighbour": figures}))
        check(figures["answered"] > 100, f"too few answers: {figures}")
        check(figures["errors"] == 0 and quiet["errors"] == 0, f"errors: {quiet} {figures}")
        check(figures["max_ms"] < 1000, f"a request took over 1 s beside the busy core: {figures}")
        # One team of 2 spinning threads (the defaults before) gave 17 times the quiet p99 here.
        check(figures["p99_ms"] <= 3 * quiet["p99_ms"] + 10,
              f"p99 {figures['p99_ms']} ms beside the busy core, {quiet['p99_ms']} ms quiet")


def case_speech():
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException
    with Server(config=SPEECH_CONFIG) as server:
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")
        for name in ("digits", "digits_encoder", "kws"):
            check(client.is_model_ready(name), f"{name} not ready")
        model = client.get_model_metadata("digits")
        check(model["platform"] == "attnzoo_speech_recognizer", f"platform {model['platform']}")
        check({i["name"]: (i["datatype"], i["shape"]) for i in model["inputs"]} ==
              {"audio": ("BYTES", [-1, 1]), "waveform": ("FP32", [-1, -1])},
              f"inputs {model['inputs']}")
        check([o["name"] for o in model["outputs"]] == ["text", "transcript"],
              f"outputs {model['outputs']}")
        encoder = client.get_model_metadata("digits_encoder")
        check([o["name"] for o in encoder["outputs"]] == ["encoded", "embedding", "log_probs"],
              f"encoder outputs {encoder['outputs']}")

        # The recognizer: a file and the same samples as a waveform, against the CLI.
        local = json.loads(subprocess.run(
            [ATTNZOO, "transcribe", "--model", "conformer_digits_ctc", "--weights",
             str(ASR_WEIGHTS), "--json", str(DIGITS_WAV)],
            capture_output=True, text=True, check=True).stdout)
        print(f"attnzoo transcribe: {local['text']!r}")
        check(local["text"] == "four one seven", f"the CLI heard {local['text']!r}")
        audio = httpclient.InferInput("audio", [1, 1], "BYTES")
        audio.set_data_from_numpy(np.array([[DIGITS_WAV.read_bytes()]], dtype=np.object_),
                                  binary_data=True)
        result = client.infer("digits", [audio])
        text = result.as_numpy("text")[0][0].decode()
        transcript = json.loads(result.as_numpy("transcript")[0][0])
        print(f"served: {text!r}")
        check(text == local["text"], f"served {text!r}, the CLI {local['text']!r}")
        check([t["token"] for t in transcript["tokens"]] == [t["token"] for t in local["tokens"]]
              and all(abs(a["start"] - b["start"]) < 1e-9 and abs(a["end"] - b["end"]) < 1e-9
                      for a, b in zip(transcript["tokens"], local["tokens"])),
              f"tokens differ: {transcript['tokens']} vs {local['tokens']}")
        samples, rate = wav_samples(DIGITS_WAV)
        check(rate == 16000, f"{DIGITS_WAV} at {rate} Hz")
        waveform = httpclient.InferInput("waveform", [1, samples.size], "FP32")
        waveform.set_data_from_numpy(samples[None, :], binary_data=True)
        result = client.infer("digits", [waveform],
                              outputs=[httpclient.InferRequestedOutput("text", binary_data=False)])
        # As JSON, tritonclient gives a BYTES element as str (as bytes from binary data).
        check(result.as_numpy("text")[0][0] == local["text"], "waveform: another text")

        # The keyword classifier against `attnzoo classify --json`.
        classified = json.loads(subprocess.run(
            [ATTNZOO, "classify", "--model", "conformer_kws", "--weights", str(KWS_WEIGHTS),
             "--topk", "3", "--json", str(STOP_WAV)],
            capture_output=True, text=True, check=True).stdout)
        audio = httpclient.InferInput("audio", [1, 1], "BYTES")
        audio.set_data_from_numpy(np.array([[STOP_WAV.read_bytes()]], dtype=np.object_))
        probabilities = client.infer("kws", [audio], outputs=[
            httpclient.InferRequestedOutput("probabilities")]).as_numpy("probabilities")[0]
        for p in classified["top"]:
            diff = abs(float(probabilities[p["index"]]) - p["prob"])
            check(diff < 1e-5, f"kws class {p['label']}: served vs classify differ by {diff}")
        check(classified["top"][0]["label"] == "stop", f"classify heard {classified['top'][0]}")

        # The encoder: concurrent requests of different lengths, batched, each against itself
        # alone (sent one at a time before).
        cuts = [samples[: int(rate * seconds)] for seconds in (0.6, 1.0, 1.5, 2.2, 0.9, 1.8)]

        def embed(cut):
            x = httpclient.InferInput("waveform", [1, cut.size], "FP32")
            x.set_data_from_numpy(cut[None, :], binary_data=True)
            c = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")
            out = c.infer("digits_encoder", [x]).as_numpy("encoded")[0]
            c.close()
            return out

        alone = [embed(cut) for cut in cuts]
        together = [None] * len(cuts)

        def run(i):
            together[i] = embed(cuts[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cuts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        worst = max(float(np.abs(a - b).max()) for a, b in zip(alone, together))
        print(f"encoder: concurrent against alone, max |diff| {worst:.2e}")
        check(all(a.shape == b.shape for a, b in zip(alone, together)), "shapes differ")
        check(worst <= 1e-5, f"batched encodings differ from alone by {worst}")
        # An execution is counted just after its responses go out: wait until the concurrent
        # requests' executions (at least one beyond the ones alone) are in the metrics.
        for _ in range(100):
            metrics = request(server.port, "GET", "/metrics")[2].decode()
            single = re.search(r'attnzoo_inference_batch_size_bucket\{model="digits_encoder"'
                               r'[^}]*le="1"\} ([0-9]+)', metrics)
            executions = re.search(
                r'nv_inference_exec_count\{model="digits_encoder"[^}]*\} ([0-9]+)', metrics)
            if int(executions.group(1)) > len(cuts):
                break
            time.sleep(0.05)
        print(f"encoder: {executions.group(1)} executions, {single.group(1)} of one request")
        check(int(single.group(1)) < int(executions.group(1)),
              "no execution held more than one request: the concurrent ones were not batched")

        def refused(call, status, fragment):
            try:
                call()
            except InferenceServerException as e:
                check(e.status() == str(status), f"status {e.status()} ({e.message()})")
                check(fragment in e.message(), f"message {e.message()!r} lacks {fragment!r}")
                return
            fail(f"accepted; expected {status} {fragment}")

        corrupt = httpclient.InferInput("audio", [1, 1], "BYTES")
        corrupt.set_data_from_numpy(np.array([[b"RIFF" + b"\0" * 60]], dtype=np.object_))
        refused(lambda: client.infer("digits", [corrupt]), 400, "input 'audio'[0]")
        nan = samples[None, :16000].copy()
        nan[0, 7] = np.nan
        bad = httpclient.InferInput("waveform", list(nan.shape), "FP32")
        bad.set_data_from_numpy(nan, binary_data=True)
        refused(lambda: client.infer("digits", [bad]), 400, "NaN or infinite")
        long = httpclient.InferInput("waveform", [1, 61 * 16000], "FP32")
        long.set_data_from_numpy(np.zeros((1, 61 * 16000), np.float32), binary_data=True)
        refused(lambda: client.infer("digits", [long]), 400, "max_audio_seconds")
        two = httpclient.InferInput("waveform", [2, 16000], "FP32")
        two.set_data_from_numpy(np.zeros((2, 16000), np.float32), binary_data=True)
        refused(lambda: client.infer("digits_encoder", [two], outputs=[
            httpclient.InferRequestedOutput("encoded")]), 400, "holds one utterance")
        client.close()

        # curl on the file routes.
        url = f"http://127.0.0.1:{server.port}/v2/models"
        heard = json.loads(subprocess.run(
            ["curl", "-sf", "--data-binary", f"@{DIGITS_WAV}", f"{url}/digits/transcribe"],
            capture_output=True, text=True, check=True).stdout)
        print(f"curl /transcribe: {heard['text']!r}")
        check(heard["model"] == "digits" and heard["text"] == local["text"], f"{heard}")
        top = json.loads(subprocess.run(
            ["curl", "-sf", "--data-binary", f"@{STOP_WAV}", f"{url}/kws/classify?top=3"],
            capture_output=True, text=True, check=True).stdout)
        check([p["label"] for p in top["predictions"]] == [p["label"] for p in classified["top"]],
              f"curl /classify {top} vs classify {classified}")
        encoded = json.loads(subprocess.run(
            ["curl", "-sf", "--data-binary", f"@{DIGITS_WAV}", f"{url}/digits_encoder/encode"],
            capture_output=True, text=True, check=True).stdout)
        check(encoded["frames"] > 10 and len(encoded["embedding"]) == encoder["outputs"][1]["shape"][1],
              f"curl /encode: {encoded['frames']} frames, {len(encoded['embedding'])} values")
        wrong = subprocess.run(["curl", "-s", "-w", "%{http_code}", "--data-binary", "@" +
                                str(DIGITS_WAV), f"{url}/kws/transcribe"],
                               capture_output=True, text=True)
        check(wrong.stdout.endswith("404"), f"/transcribe on a classifier: {wrong.stdout}")


def pcm16(samples):
    """float32 samples in [-1, 1] as 16-bit little-endian PCM bytes (a WebSocket stream's audio)."""
    return np.clip(np.round(samples * 32768.0), -32768, 32767).astype("<i2").tobytes()


async def converse(url, start, audio, block):
    """Sends start, the audio in blocks of `block` bytes and end over a WebSocket, while reading
    every reply; the replies (JSON objects, bytes) and the close code."""
    import asyncio
    import aiohttp
    replies = []
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as ws:
            await ws.send_str(json.dumps(start))

            async def send():
                for first in range(0, len(audio), block):
                    await ws.send_bytes(audio[first:first + block])
                await ws.send_str(json.dumps({"signal": "end"}))

            sender = asyncio.ensure_future(send())
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    replies.append(json.loads(message.data))
                elif message.type == aiohttp.WSMsgType.BINARY:
                    replies.append(message.data)
            try:
                await sender
            except (ConnectionResetError, aiohttp.ClientError):
                pass
            return replies, ws.close_code


def live_transcript():
    """`attnzoo transcribe --live` of digits_417.wav in chunks of 16 frames, blocks of 100 ms: the
    final result (JSON) that a stream of the same audio must give."""
    live = [json.loads(line) for line in subprocess.run(
        [ATTNZOO, "transcribe", "--model", "conformer_digits_ctc", "--weights", str(ASR_WEIGHTS),
         "--live", "--chunk", "16", "--block-ms", "100", "--json", str(DIGITS_WAV)],
        capture_output=True, text=True, check=True).stdout.splitlines() if line.strip()]
    expected = [line for line in live if line.get("final")][0]
    print(f"attnzoo transcribe --live: {expected['text']!r}")
    return expected


def case_stream():
    import asyncio
    import aiohttp
    samples, rate = wav_samples(DIGITS_WAV)
    pcm = pcm16(samples)
    block = rate // 10 * 2  # 100 ms of 16-bit samples
    expected = live_transcript()

    with Server(config=SPEECH_CONFIG) as server:
        base = f"ws://127.0.0.1:{server.port}/v2/models"
        replies, code = asyncio.run(converse(
            f"{base}/digits/stream", {"signal": "start", "nbest": 1,
                                      "continuous_decoding": False}, pcm, block))
        types = [r["type"] for r in replies]
        print(f"digits: {types.count('partial_result')} partial results, close code {code}")
        check(types[0] == "server_ready" and types[-2:] == ["final_result", "speech_end"],
              f"replies {types}")
        check(code == 1000, f"close code {code}")
        stable = ""
        for r in replies:
            if r["type"] == "partial_result":
                now = json.loads(r["nbest"])[0]["stable"]
                check(now.startswith(stable), f"stable text went from {stable!r} to {now!r}")
                stable = now
        final = json.loads(replies[-2]["nbest"])[0]
        print(f"final: {final['sentence']!r}, word pieces {final['word_pieces']}")
        check(final["sentence"] == expected["text"],
              f"streamed {final['sentence']!r}, transcribe --live {expected['text']!r}")
        check([(p["word"], p["start"], p["end"]) for p in final["word_pieces"]] ==
              [(t["token"], round(t["start"] * 1000), round(t["end"] * 1000))
               for t in expected["tokens"]], "word pieces differ from the CLI's tokens")

        # The encoder: its frames, as many as the offline encoding has.
        replies, code = asyncio.run(converse(f"{base}/digits_encoder/stream",
                                             {"signal": "start"}, pcm, block))
        frames = sum(len(r) // 4 for r in replies if isinstance(r, bytes))
        end = replies[-1]
        offline = json.loads(subprocess.run(
            ["curl", "-sf", "--data-binary", f"@{DIGITS_WAV}",
             f"http://127.0.0.1:{server.port}/v2/models/digits_encoder/encode"],
            capture_output=True, text=True, check=True).stdout)
        width = len(offline["embedding"])
        print(f"encoder stream: {end}, {frames // width} frames of {width}")
        check(end["type"] == "speech_end" and end["frames"] == offline["frames"] and
              frames == offline["frames"] * width, f"encoder stream {end} vs offline {offline['frames']}")

        async def refusals():
            async with aiohttp.ClientSession() as session:
                # max_streams 2: the third is refused with 503.
                a = await session.ws_connect(f"{base}/digits/stream")
                b = await session.ws_connect(f"{base}/digits/stream")
                try:
                    await session.ws_connect(f"{base}/digits/stream")
                    fail("a third stream was accepted with max_streams 2")
                except aiohttp.WSServerHandshakeError as e:
                    check(e.status == 503, f"third stream: {e.status}")
                await a.close()
                await b.close()
                for _ in range(50):  # the server notices the closes
                    try:
                        c = await session.ws_connect(f"{base}/digits/stream")
                        break
                    except aiohttp.WSServerHandshakeError:
                        await asyncio.sleep(0.1)
                else:
                    fail("no stream accepted after two closed")
                # Audio before start: a failure, then the close.
                await c.send_bytes(b"\0\0" * 160)
                message = await c.receive()
                reply = json.loads(message.data)
                check(reply["status"] == "failed" and "start" in reply["message"], f"{reply}")
                message = await c.receive()
                check(message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED),
                      f"not closed after a failure: {message}")
                try:
                    await session.ws_connect(f"{base}/kws/stream")
                    fail("a classifier accepted a stream")
                except aiohttp.WSServerHandshakeError as e:
                    check(e.status == 404, f"kws stream: {e.status}")

                # SIGTERM with a stream open: the stream is closed (1001), the server exits 0.
                d = await session.ws_connect(f"{base}/digits/stream")
                await d.send_str(json.dumps({"signal": "start"}))
                check(json.loads((await d.receive()).data)["type"] == "server_ready", "not ready")
                async with session.get(f"http://127.0.0.1:{server.port}/metrics") as r:
                    metrics = await r.text()
                opened = re.search(r'attnzoo_streams_opened_total\{model="digits"[^}]*\} ([0-9]+)',
                                   metrics)
                now = re.search(r'attnzoo_streams_open\{model="digits"[^}]*\} ([0-9]+)', metrics)
                print(f"digits: {opened.group(1)} streams opened, {now.group(1)} open")
                check(opened.group(1) == "5", "the first, a, b, c and d: 5 streams accepted")
                check(1 <= int(now.group(1)) <= 2, f"{now.group(1)} streams open (d, perhaps c)")
                await d.send_bytes(pcm[:block])
                server.process.send_signal(signal.SIGTERM)
                while True:
                    message = await d.receive()
                    if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                                        aiohttp.WSMsgType.CLOSING):
                        break
                check(d.close_code == 1001, f"close code at SIGTERM {d.close_code}")

        asyncio.run(refusals())


def case_wenet_folder():
    """A WeNet experiment folder served as it is (the U2++ fixture of tests/models/data, whose
    decoding is WeNet's runtime's: attention rescoring, in chunks of 16 when live): /transcribe
    and the WebSocket's final result against `attnzoo transcribe` on the folder (whose rescoring
    the AttentionRescoring and WenetFolder tests hold to WeNet's), on speech and synthetic signals
    where rescoring changes the CTC search's answer, so that a server that skipped it would
    fail. (The folder's random model hears digits in anything; its answers are not words.)"""
    import asyncio
    import wave
    folder = REPO / "tests" / "models" / "data" / "wenet_u2" / "u2pp"
    rng = np.random.default_rng(7)
    t = np.arange(16000) / 16000
    signals = {
        "chirp": 0.5 * np.sin(2 * np.pi * (100 + 3000 * t) * t),
        "am": np.sin(2 * np.pi * 440 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)),
        "clicks": (rng.random(16000) < 0.01) * 0.9,
        "mix": 0.3 * np.sin(2 * np.pi * 200 * t) + 0.2 * rng.standard_normal(16000) * (t > 0.5),
    }
    with tempfile.TemporaryDirectory() as work:
        waves = [DIGITS_WAV, STOP_WAV]
        for name, samples in signals.items():
            path = Path(work) / f"{name}.wav"
            with wave.open(str(path), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(16000)
                w.writeframes(pcm16(np.clip(samples, -1, 1)))
            waves.append(path)

        def transcribe(*args):
            out = subprocess.run([ATTNZOO, "transcribe", "--model", str(folder), "--json", *args],
                                 capture_output=True, text=True, check=True).stdout
            return [json.loads(line) for line in out.splitlines() if line.strip()]

        rescored = [transcribe(str(w))[0]["text"] for w in waves]
        ctc = [transcribe("--set", "decoding.mode=ctc", str(w))[0]["text"] for w in waves]
        changed = [i for i in range(len(waves)) if rescored[i] != ctc[i]]
        print(f"rescoring changes {len(changed)} of {len(waves)} answers: "
              f"{[(ctc[i], rescored[i]) for i in changed]}")
        check(changed, "rescoring changed no answer: this case could not tell it was done")
        live = [line for line in transcribe("--live", "--block-ms", "100", str(waves[changed[0]]))
                if line.get("final")][0]

        with Server(config=f"models:\n  - name: u2pp\n    model: {folder}\n") as server:
            url = f"http://127.0.0.1:{server.port}/v2/models/u2pp"
            for i, path in enumerate(waves):
                heard = json.loads(subprocess.run(
                    ["curl", "-sf", "--data-binary", f"@{path}", f"{url}/transcribe"],
                    capture_output=True, text=True, check=True).stdout)
                check(heard["text"] == rescored[i],
                      f"{path.name}: served {heard['text']!r}, transcribe {rescored[i]!r}")
            samples, rate = wav_samples(waves[changed[0]])
            replies, code = asyncio.run(converse(
                f"ws://127.0.0.1:{server.port}/v2/models/u2pp/stream",
                {"signal": "start", "nbest": 1}, pcm16(samples), rate // 10 * 2))
            finals = [r for r in replies if isinstance(r, dict) and r["type"] == "final_result"]
            check(code == 1000 and len(finals) == 1, f"close code {code}, replies {replies}")
            final = json.loads(finals[0]["nbest"])[0]["sentence"]
            print(f"streamed: {final!r}, transcribe --live: {live['text']!r}")
            check(final == live["text"], f"streamed {final!r}, transcribe --live {live['text']!r}")


if __name__ == "__main__":
    cases = {name[5:]: f for name, f in globals().items() if name.startswith("case_")}
    if CASE not in cases:
        fail(f"unknown case; one of {sorted(cases)}")
    cases[CASE]()
    print(f"serve_test.py {CASE}: ok")
