// The routes of the inference server, called as the HTTP side calls them (no sockets): metadata,
// infer with dynamic batching against the same model run one request at a time, the file route,
// and the answers to requests it cannot take.
#include <attnzoo/serve/inference_server.h>
#include <attnzoo/serve/served_image_classifier.h>

#include "common/test_util.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

namespace attnzoo::serve {
namespace test_inference_server {

using nlohmann::json;

const std::string kMicroVit = std::string(ATTNZOO_CONFIGS_TEST_DATA_DIR) + "/vit_micro_test.yaml";

std::shared_ptr<const ImageClassifier> micro_classifier() {
  static auto classifier = std::make_shared<const ImageClassifier>(kMicroVit);
  return classifier;
}

std::unique_ptr<InferenceServer> make_server(bool dynamic, int64_t max_batch = 8,
                                             int64_t delay_us = 20'000, int64_t queue = 64) {
  ModelEndpoint endpoint;
  endpoint.model = std::make_shared<ServedImageClassifier>("micro", micro_classifier());
  endpoint.batching.dynamic = dynamic;
  endpoint.batching.max_batch_size = max_batch;
  endpoint.batching.max_queue_delay_us = delay_us;
  endpoint.batching.max_queue_size = queue;
  std::vector<ModelEndpoint> endpoints;
  endpoints.push_back(endpoint);
  return std::make_unique<InferenceServer>(std::move(endpoints));
}

// Sends a request through handle() and waits for its answer.
HttpResponse call(InferenceServer& server, const std::string& method, const std::string& path,
                  std::string body = {}, std::map<std::string, std::string> headers = {}) {
  HttpRequest request;
  request.method = method;
  const auto question = path.find('?');
  request.path = path.substr(0, question);
  if (question != std::string::npos) request.query = path.substr(question + 1);
  request.body = std::move(body);
  request.headers = std::move(headers);
  auto promise = std::make_shared<std::promise<HttpResponse>>();
  auto future = promise->get_future();
  server.handle(std::move(request),
                [promise](HttpResponse r) { promise->set_value(std::move(r)); });
  return future.get();
}

json pixels_request(const torch::Tensor& pixels) {
  const auto flat = pixels.contiguous().view(-1);
  std::vector<float> data(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  return {{"inputs",
           {{{"name", "pixels"},
             {"datatype", "FP32"},
             {"shape", pixels.sizes().vec()},
             {"data", data}}}},
          {"outputs", {{{"name", "logits"}}}}};
}

TEST(InferenceServer, DescribesTheServerAndItsModel) {
  auto server = make_server(true);
  EXPECT_EQ(call(*server, "GET", "/v2/health/live").status, 200);
  EXPECT_EQ(call(*server, "GET", "/v2/health/ready").status, 200);
  EXPECT_EQ(call(*server, "GET", "/v2/models/micro/ready").status, 200);
  const auto server_metadata = json::parse(call(*server, "GET", "/v2").body);
  EXPECT_EQ(server_metadata["name"], "attnzoo");
  const auto metadata = json::parse(call(*server, "GET", "/v2/models/micro").body);
  EXPECT_EQ(metadata["name"], "micro");
  EXPECT_EQ(metadata["versions"], json({"1"}));
  EXPECT_EQ(metadata["inputs"][1],
            json({{"name", "pixels"}, {"datatype", "FP32"}, {"shape", {-1, 3, 32, 32}}}));
  EXPECT_EQ(metadata["outputs"][0],
            json({{"name", "logits"}, {"datatype", "FP32"}, {"shape", {-1, 7}}}));
  EXPECT_EQ(call(*server, "GET", "/v2/models/micro/versions/1").status, 200);
  EXPECT_EQ(call(*server, "GET", "/v2/models/micro/versions/2").status, 404);
  EXPECT_EQ(call(*server, "GET", "/v2/models/nope").status, 404);
  EXPECT_EQ(call(*server, "GET", "/v2/models/micro/infer").status, 405);
  server->drain();
  EXPECT_EQ(call(*server, "GET", "/v2/health/ready").status, 400);
  EXPECT_EQ(call(*server, "GET", "/v2/health/live").status, 200);
}

// Requests of 1 to 3 images sent at once from 12 threads, batched by the server, each equal to
// the model on that request alone (the ViT has no cross-row interaction: batching changes only
// the kernels' blocking).
TEST(InferenceServer, BatchedResultsEqualTheModelOnEachRequestAlone) {
  auto server = make_server(true, 8, 30'000);
  torch::manual_seed(0);
  constexpr int kRequests = 12;
  std::vector<torch::Tensor> inputs;
  for (int i = 0; i < kRequests; ++i) inputs.push_back(torch::randn({1 + i % 3, 3, 32, 32}));
  std::vector<std::future<HttpResponse>> answers;
  for (int i = 0; i < kRequests; ++i) {
    answers.push_back(std::async(std::launch::async, [&, i] {
      return call(*server, "POST", "/v2/models/micro/infer", pixels_request(inputs[i]).dump());
    }));
  }
  for (int i = 0; i < kRequests; ++i) {
    const auto response = answers[i].get();
    ASSERT_EQ(response.status, 200) << response.body;
    const auto body = json::parse(response.body);
    const auto got = torch::tensor(body["outputs"][0]["data"].get<std::vector<float>>())
                         .view({inputs[i].size(0), 7});
    const auto expected = micro_classifier()->logits(inputs[i]);
    EXPECT_LE((got - expected).abs().max().item<float>(), 1e-5f) << "request " << i;
  }
  const auto metrics = json::parse(call(*server, "GET", "/v2/models/micro").body);  // still up
  EXPECT_EQ(metrics["name"], "micro");
  const auto text = call(*server, "GET", "/metrics").body;
  EXPECT_NE(text.find("nv_inference_request_success{model=\"micro\",version=\"1\"} 12"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("nv_inference_count{model=\"micro\",version=\"1\"} 24"), std::string::npos)
      << text;  // 4 requests each of 1, 2 and 3 rows
}

TEST(InferenceServer, ClassifiesAnImageFileOnTheFileRoute) {
  auto server = make_server(false);
  cv::Mat image(40, 50, CV_8UC3);
  cv::randu(image, 0, 255);
  std::vector<uchar> png;
  cv::imencode(".png", image, png);
  const std::string file(png.begin(), png.end());
  const auto response = call(*server, "POST", "/v2/models/micro/classify?top=3", file);
  ASSERT_EQ(response.status, 200) << response.body;
  const auto body = json::parse(response.body);
  ASSERT_EQ(body["predictions"].size(), 3u);
  // The classifier's own answer on the same bytes.
  cv::Mat decoded = cv::imdecode(png, cv::IMREAD_COLOR);
  const auto expected = micro_classifier()->classify(decoded, 3);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(body["predictions"][k]["index"], expected[k].index);
    EXPECT_EQ(body["predictions"][k]["label"], expected[k].label);
    EXPECT_NEAR(body["predictions"][k]["prob"].get<double>(), expected[k].probability, 1e-6);
  }
  // The same file through infer, as binary data, with the classification extension.
  const std::string packed = pack_bytes({file});
  const json header = {
      {"inputs",
       {{{"name", "image"},
         {"datatype", "BYTES"},
         {"shape", {1, 1}},
         {"parameters", {{"binary_data_size", packed.size()}}}}}},
      {"outputs", {{{"name", "probabilities"}, {"parameters", {{"classification", 3}}}}}}};
  const auto infer =
      call(*server, "POST", "/v2/models/micro/infer", header.dump() + packed,
           {{"inference-header-content-length", std::to_string(header.dump().size())}});
  ASSERT_EQ(infer.status, 200) << infer.body;
  const auto classes = json::parse(infer.body)["outputs"][0];
  EXPECT_EQ(classes["datatype"], "BYTES");
  EXPECT_EQ(classes["shape"], json({1, 3}));
  const auto top = classes["data"][0].get<std::string>();
  // "value:index": the config names no labels.
  EXPECT_EQ(top.substr(top.find(':') + 1), std::to_string(expected[0].index));
  EXPECT_EQ(call(*server, "POST", "/v2/models/micro/classify?top=0", file).status, 400);
  EXPECT_EQ(call(*server, "POST", "/v2/models/micro/classify", "").status, 400);
  const auto corrupt = call(*server, "POST", "/v2/models/micro/classify", file.substr(0, 60));
  EXPECT_EQ(corrupt.status, 400);
  EXPECT_NE(json::parse(corrupt.body)["error"].get<std::string>().find("input 'image'[0]"),
            std::string::npos)
      << corrupt.body;
}

TEST(InferenceServer, AnswersRequestsItCannotTakeWith4xxAndJsonErrors) {
  auto server = make_server(true, 4);
  const auto error_of = [&](const std::string& body, int status) {
    const auto response = call(*server, "POST", "/v2/models/micro/infer", body);
    EXPECT_EQ(response.status, status) << response.body;
    return json::parse(response.body)["error"].get<std::string>();
  };
  EXPECT_NE(error_of("{not json", 400).find("malformed request JSON"), std::string::npos);
  auto good = pixels_request(torch::zeros({1, 3, 32, 32}));
  auto wrong = good;
  wrong["inputs"][0]["datatype"] = "FP64";
  EXPECT_NE(error_of(wrong.dump(), 400).find("input 'pixels' must be FP32 [N, 3, 32, 32]"),
            std::string::npos);
  EXPECT_NE(error_of(pixels_request(torch::zeros({1, 3, 16, 16})).dump(), 400)
                .find("got FP32 [1, 3, 16, 16]"),
            std::string::npos);
  auto unknown = good;
  unknown["outputs"] = {{{"name", "scores"}}};
  EXPECT_NE(error_of(unknown.dump(), 400).find("unknown output 'scores'"), std::string::npos);
  EXPECT_NE(error_of(pixels_request(torch::zeros({5, 3, 32, 32})).dump(), 400)
                .find("more than max_batch_size 4"),
            std::string::npos);
  auto other = good;
  other["inputs"][0]["name"] = "x";
  EXPECT_NE(error_of(other.dump(), 400).find("takes one input"), std::string::npos);
  // A bad Inference-Header-Content-Length.
  const auto response = call(*server, "POST", "/v2/models/micro/infer", good.dump(),
                             {{"inference-header-content-length", "12x"}});
  EXPECT_EQ(response.status, 400);
  // A request whose timeout passes while it waits for a batch is answered 504.
  auto slow = make_server(true, 8, 200'000);
  auto timed = good;
  timed["parameters"] = {{"timeout", 1000}};
  const auto late = call(*slow, "POST", "/v2/models/micro/infer", timed.dump());
  EXPECT_EQ(late.status, 504) << late.body;
  const auto metrics = call(*slow, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("nv_inference_request_failure{model=\"micro\",version=\"1\","
                         "reason=\"TIMEOUT\"} 1"),
            std::string::npos)
      << metrics;
}

// A model replaced while requests arrive (a repository's reload): every request is answered with
// the model's result, none refused; once removed, the model is unknown (404) and its requests
// already queued were answered.
TEST(InferenceServer, ReplacingAModelWhileRequestsArriveAnswersEveryOne) {
  auto server = make_server(/*dynamic=*/true, 8, 2000);
  torch::manual_seed(5);
  const auto pixels = torch::randn({1, 3, 32, 32});
  const auto expected = micro_classifier()->logits(pixels);
  const auto request = parse_infer_request(pixels_request(pixels).dump(), std::nullopt);
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  const auto ask = [&] {
    while (!stop) {
      std::promise<InferReply> promise;
      auto future = promise.get_future();
      server->infer("micro", "", request, [&promise](InferReply r) { promise.set_value(r); });
      const auto reply = future.get();
      std::lock_guard<std::mutex> lock(failures_mutex);
      if (!reply.ok()) {
        failures.push_back(std::to_string(reply.status) + " " + reply.error);
        continue;
      }
      const auto& data = reply.response.outputs.at(0).tensor.data;
      const auto logits =
          torch::from_blob(const_cast<char*>(data.data()), {1, expected.size(1)}, torch::kFloat)
              .clone();
      if ((logits - expected).abs().max().item<float>() > 1e-5f) failures.push_back("logits");
      ++answered;
    }
  };
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) clients.emplace_back(ask);
  for (int i = 0; i < 30; ++i) {
    ModelEndpoint endpoint;
    endpoint.model = std::make_shared<ServedImageClassifier>("micro", micro_classifier());
    endpoint.batching.max_batch_size = 8;
    endpoint.batching.max_queue_delay_us = 2000;
    server->install(std::move(endpoint));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, the first: " << failures.front();
  EXPECT_GT(answered.load(), 10);
  EXPECT_EQ(server->model_names(), std::vector<std::string>{"micro"});

  EXPECT_TRUE(server->remove("micro"));
  EXPECT_FALSE(server->remove("micro"));
  std::promise<InferReply> promise;
  server->infer("micro", "", request, [&promise](InferReply r) { promise.set_value(r); });
  const auto gone = promise.get_future().get();
  EXPECT_EQ(gone.status, 404);
  EXPECT_NE(gone.error.find("unknown model 'micro'"), std::string::npos) << gone.error;
  EXPECT_EQ(call(*server, "GET", "/v2/models/micro").status, 404);
}

}  // namespace test_inference_server
}  // namespace attnzoo::serve
