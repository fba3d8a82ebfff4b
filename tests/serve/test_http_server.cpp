// The HTTP side on real loopback sockets, with a handler that answers from another thread as the
// batcher does: keep-alive, the limits and the request deadline, and a shutdown that answers what
// was received. (serve_test.py drives the whole `attnzoo serve` the same way; this one runs under
// the sanitizers too.)
#include <attnzoo/serve/http_server.h>

#include "serve_test_util.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <regex>
#include <thread>

namespace attnzoo::serve {
namespace test_http_server {

using namespace std::chrono_literals;

// Echoes the method, path and body length; answers `delay` later from a thread of its own.
class EchoHandler : public HttpHandler {
 public:
  explicit EchoHandler(std::chrono::milliseconds delay = 0ms) : later_(delay) {}
  void handle(HttpRequest request, Respond respond) override {
    ++received;
    later_.post([request = std::move(request), respond = std::move(respond)] {
      HttpResponse response;
      response.content_type = "text/plain";
      response.body =
          request.method + " " + request.path + " " + std::to_string(request.body.size());
      respond(std::move(response));
    });
  }
  // Waits for the replies in flight: they hold their connections, which the server owns, so a
  // test calls it before its server is destroyed.
  void finish() { later_.wait(); }
  std::atomic<int> received{0};

 private:
  testing::LaterReplies later_;
};

class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    timeval timeout{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~Client() { close(fd_); }
  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // One response (by its Content-Length), or what came before the connection closed.
  std::string response() {
    std::string got;
    char buffer[4096];
    while (true) {
      const auto head = got.find("\r\n\r\n");
      if (head != std::string::npos) {
        std::smatch m;
        const std::string header = got.substr(0, head);
        if (std::regex_search(header, m,
                              std::regex("Content-Length: ([0-9]+)", std::regex::icase)) &&
            got.size() >= head + 4 + std::stoul(m[1])) {
          return got;
        }
      }
      const auto n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return got;
      got.append(buffer, static_cast<size_t>(n));
    }
  }
  ssize_t receive(char* buffer, size_t size) { return recv(fd_, buffer, size, 0); }
  bool closed_by_peer() {
    char c;
    return recv(fd_, &c, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

ssize_t recv_some(Client& client, char* buffer, size_t size) {
  return client.receive(buffer, size);
}

int status_of(const std::string& response) {
  std::smatch m;
  return std::regex_search(response, m, std::regex("^HTTP/1\\.1 ([0-9]{3})")) ? std::stoi(m[1]) : 0;
}

HttpServerOptions small_limits() {
  HttpServerOptions options;
  options.port = 0;
  options.max_body_bytes = 1000;
  options.max_header_bytes = 2000;
  options.request_timeout = 1500ms;
  return options;
}

TEST(HttpServer, KeepsConnectionsAliveAcrossRequestsAnsweredFromOtherThreads) {
  EchoHandler handler(5ms);
  HttpServer server(small_limits(), handler);
  server.start();
  Client client(server.port());
  ASSERT_TRUE(client.connected());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        client.send("POST /v2/x?q=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"));
    const auto response = client.response();
    EXPECT_EQ(status_of(response), 200) << response;
    EXPECT_NE(response.find("POST /v2/x 5"), std::string::npos) << response;
  }
  EXPECT_EQ(handler.received, 3);
  // The connection waits for a fourth request: shutdown closes it at once, not after the grace.
  const auto start = std::chrono::steady_clock::now();
  server.shutdown(5s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_TRUE(client.closed_by_peer());
  handler.finish();
}

TEST(HttpServer, AnswersExpect100ContinueBeforeTheBody) {
  EchoHandler handler;
  HttpServer server(small_limits(), handler);
  server.start();
  Client client(server.port());
  client.send("POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
  // The interim answer comes before any body byte is sent (recv would time out otherwise).
  char interim[64] = {};
  const auto n = recv_some(client, interim, sizeof(interim) - 1);
  EXPECT_EQ(std::string(interim, n > 0 ? static_cast<size_t>(n) : 0).rfind("HTTP/1.1 100", 0), 0u);
  client.send("abcd");
  const auto response = client.response();
  EXPECT_EQ(status_of(response), 200) << response;
  EXPECT_NE(response.find("POST /up 4"), std::string::npos);
  // Past the limit: refused from the header, no interim answer.
  Client big(server.port());
  big.send("POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(status_of(big.response()), 413);
  server.shutdown(1s);
  handler.finish();
}

TEST(HttpServer, RefusesBodiesAndHeadersPastTheLimits) {
  EchoHandler handler;
  HttpServer server(small_limits(), handler);
  server.start();
  {
    Client client(server.port());
    const auto start = std::chrono::steady_clock::now();
    client.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2147483648\r\n\r\nxx");
    const auto response = client.response();
    EXPECT_EQ(status_of(response), 413) << response;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
    EXPECT_TRUE(client.closed_by_peer());
  }
  {
    Client client(server.port());
    std::string chunked = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 5; ++i) chunked += "100\r\n" + std::string(256, 'x') + "\r\n";
    client.send(chunked + "0\r\n\r\n");
    EXPECT_EQ(status_of(client.response()), 413);
  }
  {
    Client client(server.port());
    client.send("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(3000, 'a') + "\r\n\r\n");
    EXPECT_EQ(status_of(client.response()), 431);
  }
  {
    Client client(server.port());
    client.send("NOT HTTP\r\n\r\n");
    EXPECT_EQ(status_of(client.response()), 400);
  }
  EXPECT_EQ(handler.received, 0);
  server.shutdown(1s);
  handler.finish();
}

TEST(HttpServer, DisconnectsAClientThatDoesNotFinishItsRequestInTime) {
  EchoHandler handler;
  HttpServer server(small_limits(), handler);
  server.start();
  Client slow(server.port());
  const auto start = std::chrono::steady_clock::now();
  slow.send("GET / HTTP/1.1\r\n");  // and nothing more
  EXPECT_TRUE(slow.closed_by_peer());
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 1200ms);
  EXPECT_LT(waited, 5s);
  server.shutdown(1s);
  handler.finish();
}

TEST(HttpServer, ShutdownAnswersWhatWasReceivedAndClosesIdleConnections) {
  EchoHandler handler(300ms);
  auto server = std::make_unique<HttpServer>(small_limits(), handler);
  server->start();
  const uint16_t port = server->port();
  Client busy(port);
  Client idle(port);
  busy.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
  while (handler.received == 0) std::this_thread::sleep_for(1ms);
  server->stop_accepting();
  EXPECT_TRUE(idle.closed_by_peer());
  const auto response = busy.response();
  EXPECT_EQ(status_of(response), 200) << response;
  EXPECT_NE(response.find("Connection: close"), std::string::npos) << response;
  server->shutdown(5s);
  Client late(port);
  EXPECT_FALSE(late.connected());
  handler.finish();
}

}  // namespace test_http_server
}  // namespace attnzoo::serve
