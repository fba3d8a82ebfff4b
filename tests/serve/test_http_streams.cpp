// WebSocket streams on the HTTP server, on loopback sockets with Boost.Beast's own client: the
// upgrade handed to the handler's stream, messages relayed one at a time in order (the next read
// only after the reply), a refused upgrade, the limits (message size, idle time) and the close at
// shutdown (1001).
#include <attnzoo/serve/http_server.h>

#include "serve_test_util.h"

#include <gtest/gtest.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <atomic>
#include <chrono>
#include <thread>

namespace attnzoo::serve {
namespace test_http_streams {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

// Answers each message from a thread of its own, `delay` later: the text "<n> bytes" and the
// message back; "bye" gets "bye" and the close.
class EchoStream : public StreamHandler {
 public:
  EchoStream(std::atomic<int>& received, std::chrono::milliseconds delay)
      : received_(received), later_(delay) {}
  void on_message(WebSocketMessage message, StreamRespond respond) override {
    ++received_;
    later_.post([message = std::move(message), respond = std::move(respond)] {
      StreamReply reply;
      if (message.text && message.data == "bye") {
        reply.messages.push_back({true, "bye"});
        reply.close = true;
        reply.close_reason = "done";
      } else {
        reply.messages.push_back({true, std::to_string(message.data.size()) + " bytes"});
        reply.messages.push_back(message);
      }
      respond(std::move(reply));
    });
  }

 private:
  std::atomic<int>& received_;
  testing::LaterReplies later_;
};

class StreamingHandler : public HttpHandler {
 public:
  explicit StreamingHandler(std::chrono::milliseconds delay = 0ms) : delay_(delay) {}
  void handle(HttpRequest, Respond respond) override { respond(HttpResponse{}); }
  std::shared_ptr<StreamHandler> open_stream(const HttpRequest& request,
                                             HttpResponse& refusal) override {
    if (request.path != "/echo") return HttpHandler::open_stream(request, refusal);
    return std::make_shared<EchoStream>(received, delay_);
  }
  std::atomic<int> received{0};

 private:
  std::chrono::milliseconds delay_;
};

HttpServerOptions options() {
  HttpServerOptions o;
  o.port = 0;
  o.max_body_bytes = 4096;
  o.request_timeout = 2s;
  o.stream_idle_timeout = 2s;
  return o;
}

// A client connection; handshake() to a path of the server.
struct WsClient {
  net::io_context io;
  websocket::stream<tcp::socket> ws{io};
  explicit WsClient(uint16_t port) {
    ws.next_layer().connect({net::ip::make_address("127.0.0.1"), port});
  }
  std::string read(bool* text = nullptr) {
    beast::flat_buffer buffer;
    ws.read(buffer);
    if (text) *text = ws.got_text();
    return beast::buffers_to_string(buffer.data());
  }
  // The error the next read ends with (the close frame, a closed socket).
  beast::error_code read_error() {
    beast::flat_buffer buffer;
    beast::error_code ec;
    while (!ec) ws.read(buffer, ec);
    return ec;
  }
};

TEST(HttpStreams, RelaysMessagesInOrderUntilTheStreamCloses) {
  StreamingHandler handler;
  HttpServer server(options(), handler);
  server.start();
  WsClient client(server.port());
  client.ws.handshake("127.0.0.1", "/echo");
  client.ws.text(true);
  client.ws.write(net::buffer(std::string("hello")));
  bool text = false;
  EXPECT_EQ(client.read(&text), "5 bytes");
  EXPECT_TRUE(text);
  EXPECT_EQ(client.read(&text), "hello");
  EXPECT_TRUE(text);
  client.ws.binary(true);
  const std::string binary("\x00\x01\x02", 3);
  client.ws.write(net::buffer(binary));
  EXPECT_EQ(client.read(), "3 bytes");
  EXPECT_EQ(client.read(&text), binary);
  EXPECT_FALSE(text);
  client.ws.text(true);
  client.ws.write(net::buffer(std::string("bye")));
  EXPECT_EQ(client.read(), "bye");
  EXPECT_EQ(client.read_error(), websocket::error::closed);
  EXPECT_EQ(client.ws.reason().code, websocket::close_code::normal);
  EXPECT_EQ(std::string(client.ws.reason().reason.c_str()), "done");
  server.shutdown(1s);
}

TEST(HttpStreams, ReadsTheNextMessageOnlyAfterTheReply) {
  StreamingHandler handler(400ms);
  HttpServer server(options(), handler);
  server.start();
  WsClient client(server.port());
  client.ws.handshake("127.0.0.1", "/echo");
  for (int i = 0; i < 3; ++i) client.ws.write(net::buffer(std::to_string(i)));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(handler.received, 1) << "one message in hand at a time";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(client.read(), "1 bytes");
    EXPECT_EQ(client.read(), std::to_string(i));
  }
  EXPECT_EQ(handler.received, 3);
  server.shutdown(1s);
}

TEST(HttpStreams, RefusesAnUpgradeNoStreamTakes) {
  StreamingHandler handler;
  HttpServer server(options(), handler);
  server.start();
  WsClient client(server.port());
  beast::error_code ec;
  client.ws.handshake("127.0.0.1", "/elsewhere", ec);
  EXPECT_EQ(ec, websocket::error::upgrade_declined);
  // The refusal itself, read by hand: Beast's client keeps only the error.
  net::io_context io;
  tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), server.port()});
  http::request<http::empty_body> upgrade(http::verb::get, "/elsewhere", 11);
  upgrade.set(http::field::host, "127.0.0.1");
  upgrade.set(http::field::connection, "Upgrade");
  upgrade.set(http::field::upgrade, "websocket");
  upgrade.set(http::field::sec_websocket_version, "13");
  upgrade.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  http::write(socket, upgrade);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(socket, buffer, response);
  EXPECT_EQ(response.result_int(), 404);
  EXPECT_NE(response.body().find("no WebSocket route /elsewhere"), std::string::npos)
      << response.body();
  server.shutdown(1s);
}

TEST(HttpStreams, ClosesAMessageTooLargeAndAnIdleStream) {
  StreamingHandler handler;
  auto o = options();
  o.stream_idle_timeout = 500ms;
  HttpServer server(o, handler);
  server.start();
  WsClient large(server.port());
  large.ws.handshake("127.0.0.1", "/echo");
  large.ws.write(net::buffer(std::string(8192, 'x')));
  EXPECT_TRUE(large.read_error());
  EXPECT_EQ(large.ws.reason().code, websocket::close_code::too_big);
  EXPECT_EQ(handler.received, 0);

  WsClient idle(server.port());
  idle.ws.handshake("127.0.0.1", "/echo");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(idle.read_error());
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 400ms);
  EXPECT_LT(waited, 5s);
  server.shutdown(1s);
}

TEST(HttpStreams, StopAcceptingClosesStreamsWithGoingAway) {
  StreamingHandler handler(300ms);
  HttpServer server(options(), handler);
  server.start();
  WsClient waiting(server.port());
  waiting.ws.handshake("127.0.0.1", "/echo");
  WsClient busy(server.port());
  busy.ws.handshake("127.0.0.1", "/echo");
  busy.ws.write(net::buffer(std::string("last")));
  while (handler.received == 0) std::this_thread::sleep_for(1ms);
  server.stop_accepting();
  EXPECT_EQ(waiting.read_error(), websocket::error::closed);
  EXPECT_EQ(waiting.ws.reason().code, websocket::close_code::going_away);
  // The message in hand is answered first.
  EXPECT_EQ(busy.read(), "4 bytes");
  EXPECT_EQ(busy.read(), "last");
  EXPECT_EQ(busy.read_error(), websocket::error::closed);
  EXPECT_EQ(busy.ws.reason().code, websocket::close_code::going_away);
  const auto start = std::chrono::steady_clock::now();
  server.shutdown(5s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

}  // namespace test_http_streams
}  // namespace attnzoo::serve
