// The metrics page: Triton's names and labels, every model listed from the start, a cumulative
// batch-size histogram, and text a Prometheus parser takes (each sample line "name{labels}
// value", every family announced by HELP and TYPE before its samples).
#include <attnzoo/serve/metrics.h>

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>

namespace attnzoo::serve {
namespace test_metrics {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    if (l == line) return true;
  }
  return false;
}

TEST(ServerMetrics, CountsByModelStatusAndBatchSize) {
  ServerMetrics metrics;
  metrics.add_model("vit", "1");
  metrics.add_model("idle \"model\"", "1");
  metrics.request_succeeded("vit", 1500.0);
  metrics.request_succeeded("vit", 500.0);
  metrics.request_failed("vit", FailureReason::kRejected);
  metrics.request_failed("vit", FailureReason::kTimeout);
  metrics.request_failed("vit", FailureReason::kTimeout);
  metrics.batch_executed("vit", 1, 10.0, 1.0, 2.0, 3.0);
  metrics.batch_executed("vit", 3, 30.0, 1.0, 2.0, 3.0);
  metrics.batch_executed("vit", 8, 80.0, 1.0, 2.0, 3.0);
  metrics.batch_executed("vit", 300, 0.0, 1.0, 2.0, 3.0);
  metrics.http_response(200);
  metrics.http_response(503);
  metrics.stream_opened("vit");
  metrics.stream_opened("vit");
  metrics.stream_closed("vit");
  const auto text = metrics.render();
  const std::string vit = "{model=\"vit\",version=\"1\"";
  EXPECT_TRUE(has_line(text, "nv_inference_request_success" + vit + "} 2")) << text;
  EXPECT_TRUE(has_line(text, "nv_inference_request_failure" + vit + ",reason=\"REJECTED\"} 1"));
  EXPECT_TRUE(has_line(text, "nv_inference_request_failure" + vit + ",reason=\"TIMEOUT\"} 2"));
  EXPECT_TRUE(has_line(text, "nv_inference_request_failure" + vit + ",reason=\"BACKEND\"} 0"));
  EXPECT_TRUE(has_line(text, "nv_inference_count" + vit + "} 312"));
  EXPECT_TRUE(has_line(text, "nv_inference_exec_count" + vit + "} 4"));
  EXPECT_TRUE(has_line(text, "nv_inference_request_duration_us" + vit + "} 2000"));
  EXPECT_TRUE(has_line(text, "nv_inference_queue_duration_us" + vit + "} 120"));
  EXPECT_TRUE(has_line(text, "nv_inference_compute_infer_duration_us" + vit + "} 8"));
  // Cumulative buckets: 1 | 3 (le 4) | 8 (le 8) | 300 (+Inf only).
  EXPECT_TRUE(has_line(text, "attnzoo_inference_batch_size_bucket" + vit + ",le=\"1\"} 1"));
  EXPECT_TRUE(has_line(text, "attnzoo_inference_batch_size_bucket" + vit + ",le=\"2\"} 1"));
  EXPECT_TRUE(has_line(text, "attnzoo_inference_batch_size_bucket" + vit + ",le=\"4\"} 2"));
  EXPECT_TRUE(has_line(text, "attnzoo_inference_batch_size_bucket" + vit + ",le=\"8\"} 3"));
  EXPECT_TRUE(has_line(text, "attnzoo_inference_batch_size_bucket" + vit + ",le=\"256\"} 3"));
  EXPECT_TRUE(has_line(text, "attnzoo_inference_batch_size_bucket" + vit + ",le=\"+Inf\"} 4"));
  EXPECT_TRUE(has_line(text, "attnzoo_inference_batch_size_sum" + vit + "} 312"));
  EXPECT_TRUE(has_line(text, "attnzoo_inference_batch_size_count" + vit + "} 4"));
  EXPECT_TRUE(has_line(text, "attnzoo_http_responses_total{code=\"503\"} 1"));
  EXPECT_TRUE(has_line(text, "attnzoo_streams_opened_total" + vit + "} 2"));
  EXPECT_TRUE(has_line(text, "attnzoo_streams_open" + vit + "} 1"));
  // A model with no traffic is listed, its label value escaped.
  EXPECT_TRUE(
      has_line(text, "nv_inference_request_success{model=\"idle \\\"model\\\"\",version=\"1\"} 0"));

  // Exposition format: comments are HELP/TYPE, each family's TYPE comes before its samples, and
  // every sample is name{labels} number.
  const std::regex sample(R"(([a-z_]+)\{[^}]*\} [-+0-9.e]+)");
  std::set<std::string> typed;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, sample)) << line;
    std::string family = match[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          typed.count(family.substr(0, family.size() - s.size())) != 0) {
        family = family.substr(0, family.size() - s.size());
      }
    }
    EXPECT_EQ(typed.count(family), 1u) << "no TYPE before " << line;
  }
}

}  // namespace test_metrics
}  // namespace attnzoo::serve
