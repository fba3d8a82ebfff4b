#!/usr/bin/env python3
"""`attnzoo serve`'s gRPC service and model repository as their users meet them, on loopback,
one scenario per CTest entry (serve_test.py has the HTTP ones and the helpers):

  grpc          Triton's gRPC client (tritonclient.grpc) beside its HTTP client on the same
                server: health, server and model metadata equal to HTTP's, infer with raw tensors
                and (through the protocol's own stubs) typed contents, the logits equal to HTTP's
                and within 1e-4 of timm's, the classification extension, refusals with their gRPC
                codes, malformed messages, the client's deadline honoured by the server (TIMEOUT
                in its metrics), SIGTERM with calls in flight: each answered, exit status 0.
  grpc_stream   ModelStreamInfer: live speech as a sequence (waveform chunks, sequence_start /
                sequence_end), its final text and tokens equal to `attnzoo transcribe --live`,
                partial results whose stable text only grows; two sequences interleaved on one
                stream; ordinary requests in the stream; errors as stream responses with the
                stream going on; an encoder's frames equal to the offline encoding's count;
                max_streams; SIGTERM with a stream open (UNAVAILABLE, exit status 0).
  repository    --model-repository: the index over HTTP and gRPC; unload, load; reloads under
                load from HTTP and gRPC clients with no failed request; a failed load that
                leaves the old model serving; RSS over 20 load/unload cycles of ViT-S.

usage: serve_grpc_test.py CASE ATTNZOO REPO_ROOT
"""
import json
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_test  # noqa: E402
from serve_test import (CASE, DIGIT_IMAGE, DIGITS_WAV, DIGITS_WEIGHTS,  # noqa: E402
                        SPEECH_CONFIG, Server, check, fail, request, wav_samples)

import load_test  # noqa: E402  (serve_test put tools/scripts on the path)


def grpc_port(server):
    match = re.search(r"grpc://[0-9.]+:([0-9]+)", "".join(server.output))
    check(match is not None, f"no gRPC address in {''.join(server.output)}")
    return int(match.group(1))


def refused(call, code, fragment):
    """`call` must raise InferenceServerException with gRPC status `code` ("NOT_FOUND", ...)."""
    from tritonclient.utils import InferenceServerException
    try:
        call()
    except InferenceServerException as e:
        check(e.status() == f"StatusCode.{code}", f"status {e.status()} ({e.message()}), "
                                                  f"expected {code}")
        check(fragment in e.message(), f"message {e.message()!r} lacks {fragment!r}")
        return
    fail(f"accepted; expected {code} {fragment}")


def metric(port, name, labels):
    _, _, body = request(port, "GET", "/metrics")
    pattern = re.escape(name) + r"\{" + labels + r"[^}]*\} ([0-9.e+]+)"
    match = re.search(pattern, body.decode())
    return float(match.group(1)) if match else 0.0


def case_grpc():
    import grpc
    import torch
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    with Server("--model", "vit_digits", "--weights", str(DIGITS_WEIGHTS),
                "--max-queue-delay-us", "1000", "--instances", "1", "--threads", "1") as server:
        url = f"127.0.0.1:{grpc_port(server)}"
        client = grpcclient.InferenceServerClient(url=url)
        http = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")
        check(client.is_server_live() and client.is_server_ready(), "not live and ready")
        check(client.is_model_ready("vit_digits"), "model not ready")
        refused(lambda: client.is_model_ready("vit_nope"), "NOT_FOUND", "unknown model 'vit_nope'")
        metadata = client.get_server_metadata(as_json=True)
        check(metadata["name"] == "attnzoo" and metadata["extensions"] ==
              http.get_server_metadata()["extensions"], f"server metadata {metadata}")
        model = client.get_model_metadata("vit_digits", as_json=True)
        over_http = http.get_model_metadata("vit_digits")
        for key in ("inputs", "outputs"):
            check([(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in model[key]]
                  == [(t["name"], t["datatype"], t["shape"]) for t in over_http[key]],
                  f"{key}: gRPC {model[key]}, HTTP {over_http[key]}")
        check(model["platform"] == over_http["platform"], f"platform {model['platform']}")

        rng = np.random.default_rng(0)
        pixels = rng.standard_normal((3, 3, 32, 32), dtype=np.float32)
        with torch.no_grad():
            expected = serve_test.timm_digits()(torch.from_numpy(pixels)).numpy()
        x = grpcclient.InferInput("pixels", list(pixels.shape), "FP32")
        x.set_data_from_numpy(pixels)
        result = client.infer("vit_digits", [x], request_id="g1", outputs=[
            grpcclient.InferRequestedOutput("logits")])
        check(result.get_response().id == "g1", "request id not echoed")
        logits = result.as_numpy("logits")
        check(result.as_numpy("probabilities") is None, "an output that was not asked for came")
        hx = httpclient.InferInput("pixels", list(pixels.shape), "FP32")
        hx.set_data_from_numpy(pixels, binary_data=True)
        over_http = http.infer("vit_digits", [hx]).as_numpy("logits")
        diff = float(np.abs(logits - expected).max())
        print(f"gRPC logits {logits.shape}: max |attnzoo - timm| {diff:.2e}, "
              f"equal to HTTP's: {np.array_equal(logits, over_http)}")
        check(diff < 1e-4, f"logits differ from timm's by {diff}")
        check(np.array_equal(logits, over_http), "gRPC and HTTP gave different logits")

        # Typed contents (fp32_contents), which Triton's client never sends: the protocol's stubs.
        channel = grpc.insecure_channel(url)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        typed = service_pb2.ModelInferRequest(model_name="vit_digits", id="typed")
        tensor = typed.inputs.add(name="pixels", datatype="FP32", shape=list(pixels.shape))
        tensor.contents.fp32_contents.extend(pixels.ravel().tolist())
        reply = stub.ModelInfer(typed)
        typed_logits = np.frombuffer(reply.raw_output_contents[0], dtype="<f4").reshape(3, 10)
        check(reply.id == "typed" and np.array_equal(typed_logits, over_http),
              "typed contents gave other logits than raw bytes")

        def stub_refused(message, code, fragment):
            try:
                stub.ModelInfer(message)
            except grpc.RpcError as e:
                check(e.code() == getattr(grpc.StatusCode, code) and fragment in e.details(),
                      f"{e.code()} {e.details()!r}, expected {code} {fragment!r}")
                return
            fail(f"accepted; expected {code} {fragment}")

        bad = service_pb2.ModelInferRequest(model_name="vit_digits")
        bad.inputs.add(name="pixels", datatype="FP32", shape=[1, 3, 32, 32])
        bad.raw_input_contents.append(b"\0" * 100)
        stub_refused(bad, "INVALID_ARGUMENT", "needs 12288 bytes, got 100")
        bad = service_pb2.ModelInferRequest(model_name="vit_digits")
        bad.inputs.add(name="pixels", datatype="FP32", shape=[1 << 40, 1 << 40])
        stub_refused(bad, "INVALID_ARGUMENT", "larger than the server accepts")
        bad = service_pb2.ModelInferRequest(model_name="vit_digits")
        bad.inputs.add(name="pixels", datatype="FP33", shape=[1])
        stub_refused(bad, "INVALID_ARGUMENT", "unknown datatype 'FP33'")
        bad = service_pb2.ModelInferRequest(model_name="vit_digits")
        two = bad.inputs.add(name="pixels", datatype="INT8", shape=[2])
        two.contents.int_contents.extend([1, 300])
        stub_refused(bad, "INVALID_ARGUMENT", "300 does not fit INT8")
        bad = service_pb2.ModelInferRequest(model_name="vit_digits")
        bad.inputs.add(name="image", datatype="BYTES", shape=[1, 1])
        bad.inputs.add(name="pixels", datatype="FP32", shape=[1])
        bad.raw_input_contents.append(b"\1\0\0\0x")
        stub_refused(bad, "INVALID_ARGUMENT", "all inputs or none travel as raw bytes")
        # Not a ModelInferRequest at all: the client's bytes, sent as one.
        garbage = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                      request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
        try:
            garbage(b"\xff\xff\xff\xff\x0f\x01")
            fail("garbage accepted")
        except grpc.RpcError as e:
            # grpc++ refuses a message it cannot parse before attnzoo sees it (1.51: with
            # UNIMPLEMENTED); what matters is that it is refused and the server goes on.
            print(f"garbage: {e.code()} {e.details()!r}")
            check(e.code() != grpc.StatusCode.OK, f"garbage: {e.code()}")
        check(client.is_server_live(), "the server died of a malformed message")
        try:
            stub.ModelConfig(service_pb2.ModelConfigRequest(name="vit_digits"))
            fail("ModelConfig answered")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNIMPLEMENTED, f"ModelConfig: {e.code()}")

        image = grpcclient.InferInput("image", [1, 1], "BYTES")
        image.set_data_from_numpy(np.array([[DIGIT_IMAGE.read_bytes()]], dtype=np.object_))
        top = client.infer("vit_digits", [image], outputs=[
            grpcclient.InferRequestedOutput("probabilities", class_count=3)]).as_numpy(
            "probabilities")
        value, index, label = top[0][0].decode().split(":")
        print(f"digit_7.png over gRPC: {top[0].tolist()}")
        check(top.shape == (1, 3) and index == "7" and float(value) > 0.5, f"{top}")

        small = grpcclient.InferInput("pixels", [1, 3, 16, 16], "FP32")
        small.set_data_from_numpy(np.zeros((1, 3, 16, 16), np.float32))
        refused(lambda: client.infer("vit_digits", [small]), "INVALID_ARGUMENT",
                "got FP32 [1, 3, 16, 16]")
        refused(lambda: client.infer("vit_nope", [small]), "NOT_FOUND", "unknown model 'vit_nope'")
        refused(lambda: client.infer("vit_digits", [x], outputs=[
            grpcclient.InferRequestedOutput("scores")]), "INVALID_ARGUMENT",
            "unknown output 'scores'")
        refused(lambda: client.get_model_metadata("vit_digits", model_version="9"), "NOT_FOUND",
                "has no version '9'")
        refused(lambda: client.get_model_repository_index(), "FAILED_PRECONDITION",
                "no model repository")

        # The client's deadline is the request's: 64 requests of 64 images queued on one
        # instance with 30 ms each; those still waiting when it passes are not run (TIMEOUT).
        batch = rng.standard_normal((8, 3, 32, 32), dtype=np.float32)
        big = grpcclient.InferInput("pixels", list(batch.shape), "FP32")
        big.set_data_from_numpy(batch)
        before = metric(server.port, "nv_inference_request_failure", 'model="vit_digits",.*?'
                        'reason="TIMEOUT"')
        outcomes = []
        done = threading.Semaphore(0)

        def callback(result, error):
            outcomes.append("ok" if error is None else error.status())
            done.release()

        for _ in range(64):
            client.async_infer("vit_digits", [big], callback, client_timeout=0.03)
        for _ in range(64):
            check(done.acquire(timeout=60), "an async request was never answered")
        time.sleep(0.5)  # the server's own count of what expired in its queue
        timeouts = metric(server.port, "nv_inference_request_failure",
                          'model="vit_digits",.*?reason="TIMEOUT"') - before
        print(f"64 requests with a 30 ms deadline: {outcomes.count('ok')} answered, "
              f"{outcomes.count('StatusCode.DEADLINE_EXCEEDED')} past their deadline, "
              f"{timeouts:.0f} dropped unrun by the server")
        check(set(outcomes) <= {"ok", "StatusCode.DEADLINE_EXCEEDED"}, f"outcomes {set(outcomes)}")
        check(timeouts > 0, "the server ran every request: it did not take the client's deadline")

        # SIGTERM with requests in flight: each is answered, the server exits 0.
        answers = []
        done = threading.Semaphore(0)

        def answered(result, error):
            answers.append(error is None)
            done.release()

        for _ in range(16):
            client.async_infer("vit_digits", [big], answered)
        time.sleep(0.05)
        server.process.send_signal(__import__("signal").SIGTERM)
        for _ in range(16):
            check(done.acquire(timeout=60), "a request in flight at SIGTERM was never answered")
        print(f"SIGTERM with 16 requests in flight: {sum(answers)} answered")
        check(all(answers), "a request in flight at SIGTERM failed")
        client.close()
        channel.close()


def stream_sequence(client, model, samples, block, sequence_id, responses, interleave=None):
    """Sends `samples` as a sequence in blocks of `block` samples (the first with sequence_start,
    the last with sequence_end) on an open stream; `interleave`: another sequence's sender to
    call between blocks."""
    import tritonclient.grpc as grpcclient
    starts = list(range(0, len(samples), block))
    for i, first in enumerate(starts):
        chunk = samples[first:first + block].reshape(1, -1)
        x = grpcclient.InferInput("waveform", list(chunk.shape), "FP32")
        x.set_data_from_numpy(chunk)
        client.async_stream_infer(model, [x], request_id=f"{sequence_id}-{i}",
                                  sequence_id=sequence_id, sequence_start=i == 0,
                                  sequence_end=i == len(starts) - 1)
        if interleave is not None:
            next(interleave, None)


def collect(responses, count_finals, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        finals = [r for r in responses if r[0] is not None and
                  r[0].get_response().parameters.get("triton_final_response") is not None]
        if len(finals) >= count_finals:
            return
        time.sleep(0.02)
    fail(f"{count_finals} final responses did not come: {len(responses)} responses")


def case_grpc_stream():
    import tritonclient.grpc as grpcclient
    samples, rate = wav_samples(DIGITS_WAV)
    block = rate // 10  # 100 ms
    expected = serve_test.live_transcript()
    config = SPEECH_CONFIG + f"""  - name: vit_digits
    model: vit_digits
    weights: {DIGITS_WEIGHTS}
"""
    with Server(config=config) as server:
        url = f"127.0.0.1:{grpc_port(server)}"
        client = grpcclient.InferenceServerClient(url=url)
        responses = []
        lock = threading.Lock()

        def callback(result, error):
            with lock:
                responses.append((result, error))

        client.start_stream(callback)
        stream_sequence(client, "digits", samples, block, 7, responses)
        collect(responses, 1)
        errors = [e for r, e in responses if e is not None]
        check(not errors, f"errors in the stream: {errors}")
        partials = [r for r, _ in responses if r.get_response().parameters["partial"].bool_param]
        final = [r for r, _ in responses if not r.get_response().parameters["partial"].bool_param]
        check(len(final) == 1, f"{len(final)} final responses")
        stable = ""
        for r in partials:
            now = r.as_numpy("stable")[0][0].decode()
            check(now.startswith(stable), f"stable text went from {stable!r} to {now!r}")
            stable = now
        text = final[0].as_numpy("text")[0][0].decode()
        transcript = json.loads(final[0].as_numpy("transcript")[0][0])
        print(f"sequence 7: {len(partials)} partial results, final {text!r}")
        check(text == expected["text"], f"streamed {text!r}, transcribe --live {expected['text']!r}")
        check([(t["token"], round(t["start"], 6), round(t["end"], 6)) for t in transcript["tokens"]]
              == [(t["token"], round(t["start"], 6), round(t["end"], 6))
                  for t in expected["tokens"]], "tokens differ from the CLI's")
        check(final[0].get_response().parameters["sequence_id"].string_param == "7",
              "the final response does not name its sequence")

        # Two sequences interleaved on one stream, an ordinary request between them, and
        # requests that fail without ending the stream.
        responses.clear()
        pixels = np.zeros((1, 3, 32, 32), np.float32)
        x = grpcclient.InferInput("pixels", list(pixels.shape), "FP32")
        x.set_data_from_numpy(pixels)
        client.async_stream_infer("vit_digits", [x], request_id="plain")
        orphan = grpcclient.InferInput("waveform", [1, 160], "FP32")
        orphan.set_data_from_numpy(np.zeros((1, 160), np.float32))
        client.async_stream_infer("digits", [orphan], request_id="orphan", sequence_id=99)
        client.async_stream_infer("kws", [orphan], request_id="kws", sequence_id=98,
                                  sequence_start=True)
        other = iter([])

        def second():
            # sequence 8, one block each time sequence 9 sends one
            for i, first in enumerate(range(0, len(samples), block)):
                chunk = samples[first:first + block].reshape(1, -1)
                y = grpcclient.InferInput("waveform", list(chunk.shape), "FP32")
                y.set_data_from_numpy(chunk)
                client.async_stream_infer("digits", [y], request_id=f"8-{i}", sequence_id=8,
                                          sequence_start=i == 0,
                                          sequence_end=first + block >= len(samples))
                yield

        other = second()
        stream_sequence(client, "digits", samples, block, 9, responses, interleave=other)
        for _ in other:
            pass
        collect(responses, 2)
        by_id = {}
        for result, error in responses:
            if error is not None:
                by_id.setdefault("errors", []).append(str(error))
                continue
            by_id.setdefault(result.get_response().id, []).append(result)
        print(f"errors in the stream: {by_id.get('errors')}")
        errors = " ".join(by_id.get("errors", []))
        check("sequence 99 is not open" in errors, f"no error for an unopened sequence: {errors}")
        check("'kws' does not stream" in errors, f"no error for a classifier's sequence: {errors}")
        plain = by_id.get("plain", [])
        check(len(plain) == 1 and plain[0].as_numpy("logits").shape == (1, 10),
              "the ordinary request in the stream was not answered with its logits")
        finals = {r.get_response().parameters["sequence_id"].string_param:
                  r.as_numpy("text")[0][0].decode()
                  for result_list in by_id.values() if isinstance(result_list, list)
                  for r in result_list if not isinstance(r, str) and
                  "triton_final_response" in r.get_response().parameters}
        print(f"interleaved sequences: {finals}")
        check(finals == {"8": expected["text"], "9": expected["text"]}, f"finals {finals}")

        # The encoder: as many frames as the offline encoding, in raw FP32 [1, k, D] pieces.
        responses.clear()
        stream_sequence(client, "digits_encoder", samples, block, 5, responses)
        collect(responses, 1)
        frames = sum(r.as_numpy("encoded").shape[1] for r, e in responses if e is None)
        _, _, body = request(server.port, "POST", "/v2/models/digits_encoder/encode",
                             DIGITS_WAV.read_bytes())
        offline = json.loads(body)["frames"]
        print(f"encoder sequence: {frames} frames, offline {offline}")
        check(frames == offline, f"streamed {frames} frames, offline {offline}")

        # max_streams 2 counts sequences: a third open one is refused.
        responses.clear()
        for sequence in (21, 22, 23):
            y = grpcclient.InferInput("waveform", [1, 1600], "FP32")
            y.set_data_from_numpy(samples[:1600].reshape(1, -1))
            client.async_stream_infer("digits", [y], request_id=f"open{sequence}",
                                      sequence_id=sequence, sequence_start=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(e is not None for _, e in responses):
            time.sleep(0.02)
        errors = [str(e) for _, e in responses if e is not None]
        check(any("max_streams" in e for e in errors), f"a third sequence was opened: {errors}")

        # SIGTERM with the stream open (two sequences in it): it ends UNAVAILABLE, exit 0.
        server.process.send_signal(__import__("signal").SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                e is not None and "UNAVAILABLE" in str(e.status()) for _, e in responses):
            time.sleep(0.05)
        ended = [str(e.status()) for _, e in responses if e is not None]
        print(f"at SIGTERM the stream got: {ended[-1:]}")
        check(any("UNAVAILABLE" in e for e in ended), f"the stream did not end UNAVAILABLE: {ended}")
        client.stop_stream(cancel_requests=True)
        client.close()


REPO_ENTRY = """model: vit_digits
weights: {weights}
max_batch_size: 8
dynamic_batching: {{max_queue_delay_us: 1000}}
"""


def rss_mb(pid):
    return load_test.rss_kib(pid) / 1024.0


def case_repository():
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "digits").mkdir()
        (root / "digits" / "serve.yaml").write_text(REPO_ENTRY.format(weights=DIGITS_WEIGHTS))
        (root / "small").mkdir()
        (root / "small" / "serve.yaml").write_text("model: vit_small_patch16_224\n"
                                                   "instances: 1\n")
        with Server("--model-repository", folder) as server:
            http = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")
            client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_port(server)}")
            index = http.get_model_repository_index()
            print(f"index: {index}")
            check([(m["name"], m["state"]) for m in index] ==
                  [("digits", "READY"), ("small", "READY")], f"index {index}")
            grpc_index = client.get_model_repository_index(as_json=True)["models"]
            check([(m["name"], m["state"]) for m in grpc_index] ==
                  [("digits", "READY"), ("small", "READY")], f"gRPC index {grpc_index}")

            image = httpclient.InferInput("image", [1, 1], "BYTES")
            image.set_data_from_numpy(np.array([[DIGIT_IMAGE.read_bytes()]], dtype=np.object_))
            gimage = grpcclient.InferInput("image", [1, 1], "BYTES")
            gimage.set_data_from_numpy(np.array([[DIGIT_IMAGE.read_bytes()]], dtype=np.object_))
            reference = http.infer("digits", [image]).as_numpy("logits")

            http.unload_model("digits")
            index = {m["name"]: m for m in http.get_model_repository_index()}
            check(index["digits"]["state"] == "UNAVAILABLE" and
                  index["digits"].get("reason") == "unloaded", f"after unload: {index}")
            try:
                http.infer("digits", [image])
                fail("an unloaded model answered")
            except InferenceServerException as e:
                check(e.status() == "404", f"unloaded model: {e.status()} {e.message()}")
            client.load_model("digits")
            check(np.array_equal(client.infer("digits", [gimage]).as_numpy("logits"), reference),
                  "the model loaded again answers differently")
            try:
                http.load_model("nope")
                fail("a model that is not in the repository loaded")
            except InferenceServerException as e:
                check(e.status() == "400" and "no model 'nope'" in e.message(), f"{e.message()}")

            # Reloads while clients keep asking, over HTTP and gRPC: no request fails.
            stop = threading.Event()
            failures, answered = [], [0]

            def ask(use_grpc):
                c = (grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_port(server)}")
                     if use_grpc else httpclient.InferenceServerClient(
                         url=f"127.0.0.1:{server.port}"))
                while not stop.is_set():
                    try:
                        logits = c.infer("digits", [gimage if use_grpc else image]).as_numpy(
                            "logits")
                        # batched with the other clients' requests: equal within rounding
                        if not np.allclose(logits, reference, atol=1e-4):
                            failures.append("different logits")
                        answered[0] += 1
                    except InferenceServerException as e:
                        failures.append(f"{e.status()} {e.message()}")
                c.close()

            askers = [threading.Thread(target=ask, args=(g,)) for g in (False, True, False, True)]
            for t in askers:
                t.start()
            for i in range(5):
                (http if i % 2 == 0 else client).load_model("digits")
            stop.set()
            for t in askers:
                t.join()
            print(f"5 reloads under load: {answered[0]} requests answered, {len(failures)} failed")
            check(not failures, f"requests failed during reloads: {failures[:5]}")
            check(answered[0] > 20, f"only {answered[0]} requests during the reloads")

            # A load that fails leaves the old model serving, and says why.
            (root / "digits" / "serve.yaml").write_text("model: vit_digits\nweights: nope.bin\n")
            try:
                http.load_model("digits")
                fail("a broken serve.yaml loaded")
            except InferenceServerException as e:
                print(f"broken load: {e.status()} {e.message()}")
                check(e.status() == "400" and "serve.yaml" in e.message() and
                      "weights" in e.message(), f"{e.message()}")
            check(np.array_equal(http.infer("digits", [image]).as_numpy("logits"), reference),
                  "the old model stopped serving after a failed load")
            index = {m["name"]: m for m in http.get_model_repository_index()}
            check(index["digits"]["state"] == "READY" and
                  "the last load failed" in index["digits"].get("reason", ""), f"{index}")
            (root / "digits" / "serve.yaml").write_text(REPO_ENTRY.format(weights=DIGITS_WEIGHTS))

            # Memory returned: ViT-S (22M parameters, 88 MB) loaded and unloaded 20 times.
            pid = server.process.pid
            http.unload_model("small")
            time.sleep(1.0)
            resident = []
            for cycle in range(20):
                http.load_model("small")
                loaded = rss_mb(pid)
                http.unload_model("small")
                time.sleep(0.3)  # the retired model is freed on the server's own thread
                resident.append((loaded, rss_mb(pid)))
            print("RSS MB loaded/unloaded by cycle: " +
                  " ".join(f"{a:.0f}/{b:.0f}" for a, b in resident))
            footprint = resident[0][0] - resident[0][1]
            growth = resident[-1][1] - resident[4][1]
            print(f"ViT-S: {footprint:.0f} MB when loaded; unloaded RSS grew {growth:.1f} MB "
                  f"from cycle 5 to 20")
            check(footprint > 60, f"loading ViT-S took only {footprint:.0f} MB: not measured")
            check(growth < 16, f"RSS grew {growth:.1f} MB over 15 load/unload cycles")
            http.close()
            client.close()


if __name__ == "__main__":
    cases = {name[5:]: f for name, f in globals().items() if name.startswith("case_")}
    if CASE not in cases:
        fail(f"unknown case; one of {sorted(cases)}")
    cases[CASE]()
    print(f"serve_grpc_test.py {CASE}: ok")
