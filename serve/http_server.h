// The HTTP/1.1 side of `attnzoo serve`, on Boost.Beast (Boost.Asio underneath): keep-alive
// connections on a few I/O threads, every request read whole (header and body) before the
// handler sees it, and limits on everything a client controls:
//
//   - the header's and the body's size (max_header_bytes, max_body_bytes), checked as bytes
//     arrive, chunked bodies included: a 2 GB upload is refused (413) from its Content-Length,
//     without reading it;
//   - one deadline per request (request_timeout): a client that sends one byte a second, or
//     opens a connection and sends nothing, is disconnected when it passes, whatever it sent;
//   - the time to write a response (write_timeout), for clients that stop reading;
//   - the number of open connections (max_connections); past it, new ones get 503 and are closed.
//
// Why Beast and not Debian's cpp-httplib (0.11): that version queues accepted connections
// without bound, checks the body limit only against Content-Length (a chunked body passes),
// has no deadline for a whole request (a slow client holds a worker thread), and has no
// WebSocket, which streaming speech needs (Beast has it on the same connections).
//
// A handler answers through a callback that may be called from any thread, later: requests wait
// for the dynamic batcher without holding an I/O thread.
//
// A WebSocket upgrade request (RFC 6455) is offered to the handler's open_stream(); a stream it
// accepts takes over the connection. Its messages reach the stream one at a time: the next is
// read only once the stream has replied to the last, so a client that sends faster than the
// stream computes is held back by TCP, and a connection holds at most one message (of at most
// max_body_bytes). A stream that receives nothing for stream_idle_timeout is closed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnzoo::serve {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // the target without its query
  std::string query;                           // after '?', as sent
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;

  const std::string* header(const std::string& lower_case_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type/-Length
  std::string body;
};

// Answers a request; call exactly once, from any thread. It (and each copy) holds the request's
// connection, which belongs to the server's I/O context: release it before the HttpServer is
// destroyed.
using Respond = std::function<void(HttpResponse)>;

struct WebSocketMessage {
  bool text = true;  // a text message (UTF-8), else binary
  std::string data;
};

// What a stream says back to one message: messages to send, in order, then whether to close
// the connection (normally, with `close_reason`).
struct StreamReply {
  std::vector<WebSocketMessage> messages;
  bool close = false;
  std::string close_reason;
};
using StreamRespond = std::function<void(StreamReply)>;

// One WebSocket connection's conversation.
class StreamHandler {
 public:
  virtual ~StreamHandler() = default;
  // A message of the client; call `respond` exactly once, from any thread. The next message is
  // read after it.
  virtual void on_message(WebSocketMessage message, StreamRespond respond) = 0;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual void handle(HttpRequest request, Respond respond) = 0;
  // A WebSocket upgrade request (its body empty): the stream that takes the connection, or null
  // with the HTTP answer in `refusal` (404 by default: no WebSocket route). Called on an I/O
  // thread; it should not block.
  virtual std::shared_ptr<StreamHandler> open_stream(const HttpRequest& request,
                                                     HttpResponse& refusal);
  // Every response the server writes, the ones it makes itself (413, 431, 400, 503) included.
  virtual void responded(int /*status*/) {}
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: a free port (port() says which)
  int threads = 2;       // I/O threads: reading, writing, decoding inputs
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 64 << 20;
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  size_t max_connections = 1024;
  std::chrono::milliseconds stream_idle_timeout{30000};  // WebSocket: no message for this long
  // Run first on each I/O thread (attnzoo serve: api/intra_op_threads.h's
  // use_one_intra_op_thread, so that decoding and preprocessing start no OpenMP teams).
  std::function<void()> thread_start;
};

class HttpServer {
 public:
  // Binds and listens (an error naming the address when it cannot); serving starts with start().
  HttpServer(HttpServerOptions options, HttpHandler& handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  void start();
  // Stops accepting and closes connections that wait for a request; requests already read are
  // answered (their responses say Connection: close). WebSocket streams get their reply to the
  // message in hand, then a close (1001, going away). Returns at once.
  void stop_accepting();
  // Waits until every connection has closed or `grace` passed, then stops the I/O threads.
  void shutdown(std::chrono::milliseconds grace);

  struct Impl;  // the listener and its connections (http_server.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnzoo::serve
