// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the request-head path. The input's bytes are sent on a fresh TCP connection
// to a real session of the gateway (http::server with the gateway's request handler,
// app::gateway_handler, on the memory store), whose admitted requests go to a fake upstream
// answering a fixed 200: the parser and the session's own checks, routing and canonical
// targets, identity (API key header and query, X-Forwarded-For and Forwarded from trusted
// proxies, user and header identities), the limits' decision, the rate-limit and CORS
// fields, the problem answers (400, 401, 403, 404, 413, 414, 429, 431, 502...), the relay
// and the access log are all on the way.
//
// Input: byte 0 picks one of 8 rules variants (its low 3 bits: 1 = `forwarded: rfc7239`,
// 2 = `unknown_key: reject`, 4 = small client caps, no catch-all route, no rate-limit
// headers); the rest is what the client sends. The client then shuts down its sending side
// and reads until the gateway closes. Everything is one thread and one io_context, built
// once per process; each input gets a fresh memory store (empty buckets) on a fixed clock,
// so an input is decided the same way whatever ran before it.
//
// Checked besides "no crash, no UB, no leak, no hang": what the client receives is a
// sequence of whole, well-formed HTTP/1.x responses (no truncated or trailing bytes, nothing
// after a response without keep-alive), at most one final response per request decided plus
// one, never a 500 (a handler that threw), every problem body JSON; every access log line is
// JSON (format json) or one line (plain); and what the upstream receives is a well-formed
// request with an origin-form target, no method-override field and never both
// Content-Length and Transfer-Encoding.

#include "app/request_path.hpp"
#include "fuzz_check.hpp"
#include "sluice/config/loader.hpp"
#include "sluice/http/server.hpp"
#include "sluice/observability/access_log.hpp"
#include "sluice/store/memory_store.hpp"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/parse.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// Rules shared by every variant; @NAME@ is replaced per variant.
constexpr std::string_view rules_template = R"(
listen: 127.0.0.1:0
workers: 1
store: {type: memory, max_buckets: 4096}
headers: @HEADERS@
shadow_header: X-Shadow-Limited
decision_time_header: X-Decided-At
client: {header_timeout: 5s, keepalive_timeout: 5s, body_timeout: 5s, send_timeout: 5s,
         max_headers: @MAX_HEADERS@, max_header_size: @MAX_HEAD@, max_uri_length: @MAX_URI@}
upstreams:
  api: {url: "http://127.0.0.1:@PORT@", timeout: 5s}
  based: {url: "http://127.0.0.1:@PORT@/base/", timeout: 5s}
identity:
  api_key: {header: X-API-Key, query: api_key}
  user: {header: X-User-Id}
  trusted_proxies: [127.0.0.0/8, 10.0.0.0/8, "fd00::/8"]
  forwarded: @FORWARDED@
  unknown_key: @UNKNOWN_KEY@
  ipv4_prefix: 32
  ipv6_prefix: 64
plans:
  anonymous: {limits: [{name: anon, rate: 60/1m, burst: 4}]}
  free: {limits: [{name: free_minute, rate: 100/1m, burst: 3}]}
  pro:
    limits:
      - {name: pro_second, rate: 50/1s, burst: 100}
      - {name: pro_day, algorithm: fixed_window, rate: 1000/1d}
api_keys: {key-a: free, key-p: pro, "key+b": free}
cors:
  origins: [https://app.example.com, "https://*.example.com", "http://localhost:*"]
  headers: [X-API-Key]
  expose_headers: [X-Request-Id]
  max_age: 10m
routes:
  - name: login
    match: {path: /login, methods: [POST]}
    upstream: api
    on_store_failure: fail_closed
    max_request_body: 64
    limits: [{name: login_ip, by: ip, rate: 10/1m, burst: 2}]
  - name: search
    match: {path_prefix: /v1/search, methods: [GET, POST]}
    upstream: api
    limits:
      - {name: search_key, by: api_key, rate: 5/1m, burst: 3,
         plans: {pro: {rate: 100/1m, burst: 200}}}
      - {name: search_ip, by: ip, algorithm: sliding_window, rate: 4/1m}
      - {name: search_shadow, by: ip, rate: 1/1m, burst: 1, mode: shadow}
  - name: items
    match: {path_glob: "/v1/items/*/parts/**", methods: [GET, PUT, DELETE]}
    upstream: based
    cost: 2
    limits:
      - {name: items_user, by: user, algorithm: sliding_log, rate: 5/1m}
      - {name: items_tenant, by: "header:X-Tenant", algorithm: fixed_window, rate: 6/1m}
  - name: hosted
    match: {path_prefix: /h, host: api.example.com}
    upstream: api
    upgrade: false
    max_response_body: 1
    limits: [{name: everyone, by: global, rate: 3/1s, burst: 3}]
    cors: {origins: ["*"], methods: ["*"], headers: ["*"], preflight: forward}
  - name: ws
    match: {path_prefix: /ws}
    upstream: api
    tunnel_idle_timeout: 1s
    cors: {origins: [https://app.example.com], credentials: true, methods: [GET, PUT]}
    limits: [{name: ws_ip, by: ip, rate: 2/1m, burst: 2, preflight: false}]
@DEFAULT_ROUTE@)";

const std::string default_route = R"(  - name: default
    match: {path_prefix: /}
    upstream: api
)";

std::string replace_all(std::string s, std::string_view from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

std::string rules_text(unsigned variant, std::uint16_t port) {
  const bool small = (variant & 4) != 0;
  std::string s(rules_template);
  s = replace_all(s, "@PORT@", std::to_string(port));
  s = replace_all(s, "@FORWARDED@", (variant & 1) ? "rfc7239" : "x-forwarded-for");
  s = replace_all(s, "@UNKNOWN_KEY@", (variant & 2) ? "reject" : "anonymous");
  s = replace_all(s, "@HEADERS@", small ? "[]" : "[x-ratelimit, ietf]");
  s = replace_all(s, "@MAX_HEADERS@", small ? "8" : "100");
  s = replace_all(s, "@MAX_HEAD@", small ? "1KiB" : "32KiB");
  s = replace_all(s, "@MAX_URI@", small ? "64" : "8KiB");
  s = replace_all(s, "@DEFAULT_ROUTE@", small ? "" : default_route);
  return s;
}

/// The session limits the gateway derives from `client:` (app::gateway's constructor).
sluice::http::session_limits limits_of(const sluice::config::client_settings& c) {
  sluice::http::session_limits l;
  l.header_limit = static_cast<std::uint32_t>(c.max_header_size);
  l.header_count_limit = c.max_headers;
  l.uri_limit = static_cast<std::uint32_t>(c.max_uri_length);
  l.header_timeout = c.header_timeout;
  l.idle_timeout = c.keepalive_timeout;
  l.body_timeout = c.body_timeout;
  l.body_min_rate = c.body_min_rate;
  l.send_timeout = c.send_timeout;
  return l;
}

/// The gateway's handler for the current input, and the methods of the requests it decided
/// (in order: the client's response parser needs to know which answers are to HEAD).
class input_handler final : public sluice::http::request_handler {
 public:
  std::shared_ptr<sluice::app::gateway_handler> inner;
  std::vector<bhttp::verb> methods;

  asio::awaitable<sluice::http::verdict> decide(sluice::http::request_head& head,
                                                const sluice::http::request_context& ctx) override {
    methods.push_back(head.method());
    co_return co_await inner->decide(head, ctx);
  }
  bool records() const override { return inner->records(); }
  void record(const sluice::http::request_head& head, const sluice::http::request_context& ctx,
              const sluice::http::verdict& v,
              const sluice::http::exchange_result& r) noexcept override {
    inner->record(head, ctx, v, r);
    // The line the access log just queued (to /dev/null), formatted again to be checked: a
    // JSON line must be JSON whatever bytes the client sent.
    sluice::observability::access_record a;
    a.unix_ms = r.unix_ms;
    a.client = v.access.client.empty() ? std::string_view(ctx.peer_text) : v.access.client;
    a.method = std::string_view(head.method_string().data(), head.method_string().size());
    a.target = std::string_view(head.target().data(), head.target().size());
    a.status = r.status;
    a.route = v.access.route;
    a.decision = v.access.decision;
    a.limit = v.access.limit;
    a.remaining = v.access.remaining;
    a.upstream = v.access.upstream;
    a.key_hash = v.access.key_hash;
    const auto line = format_access_line(a, sluice::observability::access_format::json);
    error_code ec;
    (void)boost::json::parse(line, ec);
    FUZZ_CHECK(!ec, "an access log JSON line is JSON");
    const auto plain = format_access_line(a, sluice::observability::access_format::plain);
    FUZZ_CHECK(plain.find('\n') == std::string::npos, "a plain line is one line");
  }
};

/// The fake upstream: answers every whole request `200` with a 2-byte body (none to HEAD),
/// keeping the connection, after checking what the gateway forwarded.
asio::awaitable<void> upstream_connection(tcp::socket socket) {
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(boost::none);
    parser.header_limit(1024 * 1024);
    auto [ec, n] = co_await bhttp::async_read(socket, buffer, parser, use_tuple);
    (void)n;
    if (ec) {
      // The relay gives up a request whose body the client did not finish: the upstream then
      // sees the connection end (or reset). Any other error is a malformed request.
      const bool ended = ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
                         ec == asio::error::eof || ec == asio::error::connection_reset ||
                         ec == asio::error::operation_aborted;
      if (!ended) std::fprintf(stderr, "upstream read: %s\n", ec.message().c_str());
      FUZZ_CHECK(ended, "the gateway forwards well-formed requests");
      co_return;
    }
    const auto& req = parser.get();
    FUZZ_CHECK(!req.target().empty() && req.target().front() == '/',
               "the upstream gets an origin-form target");
    for (const char* f : {"X-HTTP-Method-Override", "X-Method-Override", "X-HTTP-Method"}) {
      FUZZ_CHECK(req.count(f) == 0, "method-override fields are removed");
    }
    FUZZ_CHECK(req.count(bhttp::field::content_length) == 0 ||
                   req.count(bhttp::field::transfer_encoding) == 0,
               "never both Content-Length and Transfer-Encoding upstream");
    bhttp::response<bhttp::string_body> res{bhttp::status::ok, req.version()};
    res.set(bhttp::field::content_type, "text/plain");
    res.set("X-RateLimit-Remaining", "7");  // the gateway's own replace it on limited routes
    res.set(bhttp::field::vary, "Accept");
    res.content_length(2);
    if (req.method() != bhttp::verb::head) res.body() = "ok";
    res.keep_alive(req.keep_alive());
    auto [wec, wn] = co_await bhttp::async_write(socket, res, use_tuple);
    (void)wn;
    if (wec || !req.keep_alive()) co_return;
  }
}

asio::awaitable<void> upstream_accept(tcp::acceptor* acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(use_tuple);
    if (ec) co_return;
    asio::co_spawn(acceptor->get_executor(), upstream_connection(std::move(socket)),
                   asio::detached);
  }
}

/// The client of one input: sends `bytes`, shuts down its side, reads until the end.
asio::awaitable<void> client(tcp::endpoint to, std::string bytes, std::string* received,
                             bool* done) {
  tcp::socket socket(co_await asio::this_coro::executor);
  auto [cec] = co_await socket.async_connect(to, use_tuple);
  FUZZ_CHECK(!cec, "the gateway accepts the connection");
  auto [wec, wn] = co_await asio::async_write(socket, asio::buffer(bytes), use_tuple);
  (void)wec;  // the gateway may close before reading everything (after a 400)
  (void)wn;
  error_code ignored;
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  std::array<char, 16 * 1024> chunk{};
  for (;;) {
    auto [rec, rn] = co_await socket.async_read_some(asio::buffer(chunk), use_tuple);
    received->append(chunk.data(), rn);
    if (rec) break;
  }
  *done = true;
}

/// Checks what the client received: whole responses, one per decided request at most
/// (plus the session's own last answer), never 500, nothing after a closing one.
void check_responses(std::string_view bytes, const std::vector<bhttp::verb>& methods) {
  std::size_t final_responses = 0;
  while (!bytes.empty()) {
    bhttp::response_parser<bhttp::string_body> p;
    p.eager(true);
    p.body_limit(boost::none);
    p.header_limit(1024 * 1024);
    if (final_responses < methods.size() && methods[final_responses] == bhttp::verb::head) {
      p.skip(true);
    }
    error_code ec;
    while (!p.is_done()) {
      const auto used = p.put(asio::buffer(bytes.data(), bytes.size()), ec);
      bytes.remove_prefix(used);
      if (ec == bhttp::error::need_more) {
        ec = {};
        if (bytes.empty()) {
          if (p.got_some() && p.need_eof()) p.put_eof(ec);
          break;
        }
        continue;
      }
      if (ec) break;
    }
    if (ec || !p.is_done()) {
      std::fprintf(stderr, "client read: %s\n", ec ? ec.message().c_str() : "a truncated response");
    }
    FUZZ_CHECK(!ec && p.is_done(), "the gateway sends whole, well-formed responses");
    const auto& res = p.get();
    FUZZ_CHECK(res.result_int() != 500, "no request makes the handler throw (500)");
    if (res[bhttp::field::content_type] == "application/problem+json" && !res.body().empty()) {
      (void)boost::json::parse(res.body(), ec);
      FUZZ_CHECK(!ec, "a problem body is JSON (RFC 9457)");
    }
    if (res.result_int() < 200) continue;  // 100 Continue, then the final response
    ++final_responses;
    if (!res.keep_alive()) {
      FUZZ_CHECK(bytes.empty(), "nothing follows a response without keep-alive");
    }
  }
  FUZZ_CHECK(final_responses <= methods.size() + 1, "one final response per request at most");
}

/// Everything built once per process.
struct harness {
  asio::io_context ioc{1};
  tcp::acceptor upstream{ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  std::array<std::shared_ptr<const sluice::app::snapshot>, 8> variants;
  sluice::app::shared_state shared;
  std::shared_ptr<input_handler> handler = std::make_shared<input_handler>();
  std::array<std::unique_ptr<sluice::http::server>, 2> servers;  // default caps, small caps

  harness() {
    // Log lines are formatted (user-controlled text goes through fmt) and dropped.
    auto logger =
        std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
    const auto port = upstream.local_endpoint().port();
    for (unsigned v = 0; v < variants.size(); ++v) {
      auto loaded = sluice::config::load_string(rules_text(v, port), "request_head.yaml");
      for (const auto& d : loaded.diagnostics) std::fprintf(stderr, "%s\n", d.to_string().c_str());
      FUZZ_CHECK(loaded.ok(), "the target's rules load");
      variants[v] = std::make_shared<const sluice::app::snapshot>(loaded.value, v + 1);
    }
    shared.current.store(variants[0]);
    shared.access_key = "fuzz";
    shared.access = std::make_unique<sluice::observability::access_log>(
        "/dev/null", sluice::observability::access_format::json);
    for (unsigned i = 0; i < servers.size(); ++i) {
      servers[i] = std::make_unique<sluice::http::server>(
          ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), handler,
          limits_of(variants[i * 4]->rules->client), 0, false);
      servers[i]->start();
    }
    asio::co_spawn(ioc, upstream_accept(&upstream), asio::detached);
  }

  void run(unsigned variant, std::string bytes) {
    shared.current.store(variants[variant]);
    // A fresh store on a fixed clock: every input starts from full buckets.
    auto store = std::make_shared<sluice::store::memory_store>(
        [] { return std::int64_t{1'700'000'000'000}; }, 4096);
    handler->inner = std::make_shared<sluice::app::gateway_handler>(shared, store);
    handler->methods.clear();
    auto& server = *servers[(variant & 4) ? 1 : 0];
    std::string received;
    bool done = false;
    asio::co_spawn(ioc, client(server.local_endpoint(), std::move(bytes), &received, &done),
                   asio::detached);
    while (!done || server.open_sessions() > 0) ioc.run_one();
    check_responses(received, handler->methods);
    handler->inner.reset();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static harness* h = new harness();  // never destroyed: lives as long as the process
  if (size == 0) return 0;
  const unsigned variant = data[0] & 7u;
  h->run(variant, std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  return 0;
}
