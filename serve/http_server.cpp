#include <attnzoo/serve/http_server.h>

#include <attnzoo/serve/v2_protocol.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace attnzoo::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

const std::string* HttpRequest::header(const std::string& lower_case_name) const {
  const auto it = headers.find(lower_case_name);
  return it == headers.end() ? nullptr : &it->second;
}

std::shared_ptr<StreamHandler> HttpHandler::open_stream(const HttpRequest& request,
                                                        HttpResponse& refusal) {
  refusal.status = 404;
  refusal.body = error_body("no WebSocket route " + request.path);
  return nullptr;
}

namespace {

// An open connection as the server keeps track of it: an HTTP session, or a WebSocket stream
// that took one over.
class Connection {
 public:
  virtual ~Connection() = default;
  // From any thread: finish what is in hand, then close (HttpServer::stop_accepting).
  virtual void close_when_idle() = 0;
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler& handler;
  // Declared before the I/O context: sessions still queued in it unregister here when it is
  // destroyed.
  std::mutex sessions_mutex;
  std::condition_variable sessions_closed;
  std::list<std::weak_ptr<Connection>> sessions;
  size_t open_sessions = 0;
  std::atomic<bool> accepting{true};

  net::io_context io;
  // Keeps the I/O threads running while no operation is pending (every connection waiting for
  // the batcher, the acceptor closed at shutdown): answers are posted to them later.
  net::executor_work_guard<net::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;

  Impl(HttpServerOptions o, HttpHandler& h)
      : options(std::move(o)),
        handler(h),
        io(std::max(1, options.threads)),
        acceptor(net::make_strand(io)) {}

  void accept();
  // Counts `connection` as open until session_closed(); returns its place in the list.
  std::list<std::weak_ptr<Connection>>::iterator session_opened(
      const std::shared_ptr<Connection>& connection);
  void session_closed(std::list<std::weak_ptr<Connection>>::iterator where);
};

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// The method, path, query and headers of `message` (not its body).
HttpRequest request_of(const http::request<http::string_body>& message) {
  HttpRequest request;
  request.method = std::string(message.method_string());
  const std::string target(message.target());
  const auto question = target.find('?');
  request.path = target.substr(0, question);
  if (question != std::string::npos) request.query = target.substr(question + 1);
  for (const auto& field : message) {
    request.headers[lower(std::string(field.name_string()))] = std::string(field.value());
  }
  return request;
}

// How long a connection that waits for a request stays open once the server stops accepting.
constexpr std::chrono::milliseconds kLastBytesWait{200};
// Room for a body's bytes in the connection's read buffer: beast reads at most the buffer's free
// capacity at a time and empties the buffer into the body as it goes, so that without room a body
// came in reads of 512 bytes (264 recvmsg calls and 30 timer settings for a 134 KB waveform).
constexpr std::size_t kBodyReadBytes = 64 * 1024;

// A WebSocket connection handed to a StreamHandler: accept the upgrade, then read a message,
// let the handler reply, write the reply, again, until either side closes.
class StreamSession : public Connection, public std::enable_shared_from_this<StreamSession> {
 public:
  StreamSession(beast::tcp_stream stream, HttpServer::Impl& server,
                std::shared_ptr<StreamHandler> handler)
      : ws_(std::move(stream)), server_(server), handler_(std::move(handler)) {}

  void set_registration(std::list<std::weak_ptr<Connection>>::iterator where) { where_ = where; }

  void start(http::request<http::string_body> upgrade) {
    websocket::stream_base::timeout timeout;
    timeout.handshake_timeout = server_.options.request_timeout;
    timeout.idle_timeout = server_.options.stream_idle_timeout;
    timeout.keep_alive_pings = false;
    ws_.set_option(timeout);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& response) { response.set(http::field::server, "attnzoo"); }));
    ws_.read_message_max(server_.options.max_body_bytes);
    auto request = std::make_shared<http::request<http::string_body>>(std::move(upgrade));
    ws_.async_accept(*request, [self = shared_from_this(), request](beast::error_code ec) {
      if (ec) return;  // the connection goes with the session
      self->server_.handler.responded(101);
      self->read();
    });
  }

  void close_when_idle() override {
    net::post(ws_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      if (self->reading_) self->close(websocket::close_code::going_away, "server shutting down");
    });
  }

  ~StreamSession() override { server_.session_closed(where_); }

 private:
  void read() {
    if (closing_) return close(websocket::close_code::going_away, "server shutting down");
    reading_ = true;
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->reading_ = false;
      if (ec) return;  // closed by the client, a timeout, or close(): the session ends
      self->on_message();
    });
  }

  void on_message() {
    WebSocketMessage message;
    message.text = ws_.got_text();
    message.data = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    StreamRespond respond = [self = shared_from_this()](StreamReply reply) {
      net::post(self->ws_.get_executor(), [self, reply = std::move(reply)]() mutable {
        self->write(std::make_shared<StreamReply>(std::move(reply)), 0);
      });
    };
    try {
      handler_->on_message(std::move(message), std::move(respond));
    } catch (const std::exception& e) {
      close(websocket::close_code::internal_error, e.what());
    }
  }

  // The reply's messages from `next` on, then the next read or the close.
  void write(std::shared_ptr<StreamReply> reply, size_t next) {
    if (closed_) return;
    if (next == reply->messages.size()) {
      if (reply->close) return close(websocket::close_code::normal, reply->close_reason);
      return read();
    }
    const auto& message = reply->messages[next];
    ws_.text(message.text);
    ws_.async_write(net::buffer(message.data),
                    [self = shared_from_this(), reply, next](beast::error_code ec, std::size_t) {
                      if (ec) return;
                      self->write(reply, next + 1);
                    });
  }

  void close(websocket::close_code code, const std::string& reason) {
    if (closed_) return;
    closed_ = true;
    // A close reason is at most 123 bytes (RFC 6455, 5.5.1).
    websocket::close_reason why(code, reason.substr(0, 123));
    ws_.async_close(why, [self = shared_from_this()](beast::error_code) {});
  }

  websocket::stream<beast::tcp_stream> ws_;
  HttpServer::Impl& server_;
  std::shared_ptr<StreamHandler> handler_;
  beast::flat_buffer buffer_;
  std::list<std::weak_ptr<Connection>>::iterator where_;
  bool reading_ = false;
  bool closing_ = false;
  bool closed_ = false;
};

// One connection: read a request, hand it over, write the answer, again while keep-alive.
class Session : public Connection, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), server_(server), last_bytes_(stream_.get_executor()) {}

  void set_registration(std::list<std::weak_ptr<Connection>>::iterator where) { where_ = where; }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

  // From any thread: no request after the one being read or answered. A connection waiting for
  // a request gets a moment for bytes already on their way, then closes; one in the middle of
  // reading a request keeps its deadline, and the request is answered (503 once the server
  // drains).
  void close_when_idle() override {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      if (self->state_ != State::kReading) return;
      // (A new expiry on the stream would cancel the read's own deadline, not shorten it.)
      self->last_bytes_.expires_after(kLastBytesWait);
      self->last_bytes_.async_wait([self](beast::error_code ec) {
        const bool idle =
            !(self->parser_ && self->parser_->got_some()) && self->buffer_.size() == 0;
        if (!ec && self->state_ == State::kReading && idle) self->close();
      });
    });
  }

  // Refuses the connection: past max_connections.
  void refuse() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      HttpResponse response;
      response.status = 503;
      response.headers.emplace_back("Retry-After", "1");
      response.body = error_body("too many connections; try again later");
      self->write(std::move(response), 11);
    });
  }

  ~Session() override { server_.session_closed(where_); }

 private:
  enum class State { kReading, kHandling, kWriting, kClosed };

  void read() {
    if (closing_) {
      close();
      return;
    }
    state_ = State::kReading;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header_bytes));
    parser_->body_limit(server_.options.max_body_bytes);
    // One deadline for the whole request: header, the interim answer, body.
    stream_.expires_after(server_.options.request_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  // A client that asks "Expect: 100-continue" (curl does for bodies over 1 MB) waits for the
  // interim answer before it sends the body: without it, a second. A body past the limit was
  // refused with the header already (its Content-Length), so that client never sends it.
  void on_header(beast::error_code ec) {
    if (ec || parser_->is_done()) return on_read(ec);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      auto interim = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                        parser_->get().version());
      http::async_write(stream_, *interim,
                        [self = shared_from_this(), interim](beast::error_code ec, std::size_t) {
                          if (ec) return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    if (parser_->content_length().value_or(0) > buffer_.size()) buffer_.reserve(kBodyReadBytes);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      // A client that closed, timed out or was closed by shutdown gets nothing more; a request
      // past a limit or malformed gets its status, then the connection closes.
      int status = 0;
      std::string message;
      if (ec == http::error::body_limit) {
        status = 413;
        message = "the request body is larger than the server accepts (" +
                  std::to_string(server_.options.max_body_bytes) + " bytes)";
      } else if (ec == http::error::header_limit) {
        status = 431;
        message = "the request header is larger than the server accepts (" +
                  std::to_string(server_.options.max_header_bytes) + " bytes)";
      } else if (ec.category() ==
                     beast::http::make_error_code(http::error::bad_target).category() &&
                 ec != http::error::end_of_stream && ec != http::error::partial_message) {
        status = 400;
        message = "malformed HTTP request: " + ec.message();
      }
      if (status == 0) {
        close();
        return;
      }
      closing_ = true;
      HttpResponse response;
      response.status = status;
      response.body = error_body(message);
      write(std::move(response), 11);
      return;
    }
    auto& message = parser_->get();
    if (websocket::is_upgrade(message)) return upgrade();
    HttpRequest request = request_of(message);
    request.body = std::move(message.body());
    const unsigned version = message.version();
    keep_alive_ = message.keep_alive();
    parser_.reset();
    state_ = State::kHandling;
    // No deadline while the handler works: the batcher's own deadlines apply.
    stream_.expires_never();
    Respond respond = [self = shared_from_this(), version](HttpResponse response) {
      net::post(self->stream_.get_executor(),
                [self, version, response = std::move(response)]() mutable {
                  self->write(std::move(response), version);
                });
    };
    try {
      server_.handler.handle(std::move(request), std::move(respond));
    } catch (const std::exception& e) {
      HttpResponse response;
      response.status = 500;
      response.body = error_body(e.what());
      write(std::move(response), version);
    }
  }

  // The request asks for a WebSocket: the handler's stream takes the connection over (this
  // session then ends without closing it), or the refusal is written.
  void upgrade() {
    auto message = parser_->release();
    parser_.reset();
    const HttpRequest request = request_of(message);
    HttpResponse refusal;
    std::shared_ptr<StreamHandler> handler;
    try {
      handler =
          closing_ || !server_.accepting ? nullptr : server_.handler.open_stream(request, refusal);
      if (!handler && (closing_ || !server_.accepting)) {
        refusal.status = 503;
        refusal.body = error_body("the server is shutting down");
      }
    } catch (const std::exception& e) {
      refusal.status = 500;
      refusal.body = error_body(e.what());
    }
    if (!handler) {
      closing_ = true;
      return write(std::move(refusal), message.version());
    }
    state_ = State::kClosed;  // the socket is the stream's now
    stream_.expires_never();
    auto stream = std::make_shared<StreamSession>(std::move(stream_), server_, std::move(handler));
    stream->set_registration(server_.session_opened(stream));
    stream->start(std::move(message));
  }

  void write(HttpResponse response, unsigned version) {
    if (state_ == State::kClosed) return;
    state_ = State::kWriting;
    server_.handler.responded(response.status);
    auto message = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(response.status), version);
    message->set(http::field::server, "attnzoo");
    message->set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message->set(name, value);
    message->body() = std::move(response.body);
    const bool keep = keep_alive_ && !closing_ && server_.accepting;
    message->keep_alive(keep);
    message->prepare_payload();
    stream_.expires_after(server_.options.write_timeout);
    http::async_write(
        stream_, *message,
        [self = shared_from_this(), message, keep](beast::error_code ec, std::size_t) {
          if (ec || !keep) {
            self->close();
            return;
          }
          self->read();
        });
  }

  void close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    last_bytes_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  net::steady_timer last_bytes_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::list<std::weak_ptr<Connection>>::iterator where_;
  State state_ = State::kReading;
  bool keep_alive_ = true;
  bool closing_ = false;
};

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec || !accepting) return;  // closed by stop_accepting
    bool refuse = false;
    {
      std::lock_guard<std::mutex> lock(sessions_mutex);
      refuse = open_sessions >= options.max_connections;
    }
    auto session = std::make_shared<Session>(std::move(socket), *this);
    session->set_registration(session_opened(session));
    if (refuse) {
      session->refuse();
    } else {
      session->start();
    }
    accept();
  });
}

std::list<std::weak_ptr<Connection>>::iterator HttpServer::Impl::session_opened(
    const std::shared_ptr<Connection>& connection) {
  std::lock_guard<std::mutex> lock(sessions_mutex);
  ++open_sessions;
  sessions.push_front(connection);
  return sessions.begin();
}

void HttpServer::Impl::session_closed(std::list<std::weak_ptr<Connection>>::iterator where) {
  std::lock_guard<std::mutex> lock(sessions_mutex);
  sessions.erase(where);
  --open_sessions;
  sessions_closed.notify_all();
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler& handler)
    : impl_(std::make_unique<Impl>(std::move(options), handler)) {
  auto& a = impl_->acceptor;
  const auto& o = impl_->options;
  beast::error_code ec;
  const auto address = net::ip::make_address(o.host, ec);
  if (ec) throw std::invalid_argument("serve: host '" + o.host + "' is not an IP address");
  const tcp::endpoint endpoint(address, o.port);
  const std::string where = o.host + ":" + std::to_string(o.port);
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("serve: cannot listen on " + where + ": " + ec.message());
}

HttpServer::~HttpServer() { shutdown(std::chrono::milliseconds(0)); }

uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::start() {
  impl_->accept();
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i) {
    impl_->threads.emplace_back([this] {
      if (impl_->options.thread_start) impl_->options.thread_start();
      impl_->io.run();
    });
  }
}

void HttpServer::stop_accepting() {
  if (!impl_->accepting.exchange(false)) return;
  net::post(impl_->acceptor.get_executor(), [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
  // The sessions are taken under the lock and told outside it: a session whose last owner is
  // the pointer taken here unregisters itself, under the same lock, when that pointer goes.
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lock(impl_->sessions_mutex);
    for (auto& weak : impl_->sessions) {
      if (auto session = weak.lock()) open.push_back(std::move(session));
    }
  }
  for (auto& session : open) session->close_when_idle();
}

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  if (impl_->threads.empty()) return;
  stop_accepting();
  {
    std::unique_lock<std::mutex> lock(impl_->sessions_mutex);
    impl_->sessions_closed.wait_for(lock, grace, [&] { return impl_->open_sessions == 0; });
  }
  impl_->work.reset();
  impl_->io.stop();
  for (auto& thread : impl_->threads) thread.join();
  impl_->threads.clear();
}

}  // namespace attnzoo::serve
