// SPDX-License-Identifier: Apache-2.0
// The admin listener: health, readiness, the rules in force, and reload on demand.
//
// It reuses the client-facing http::server (same framing and smuggling defences) on an
// io_context and thread of its own. Its handler calls the backend synchronously: a reload
// parses a whole rules file, which takes milliseconds, and blocking this thread for that long
// delays only other admin requests, never a client's (the workers never wait on it).

#include "sluice/observability/admin.hpp"

#include "sluice/config/duration_text.hpp"
#include "sluice/http/problem.hpp"
#include "sluice/http/server.hpp"
#include "sluice/limiter/calendar.hpp"
#include "sluice/limiter/guarantee.hpp"
#include "sluice/log_throttle.hpp"
#include "sluice/observability/metrics.hpp"
#include "sluice/utf8.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <chrono>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <optional>

#include <atomic>
#include <cctype>
#include <thread>

namespace sluice::observability {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
namespace json = boost::json;

std::string by_text(const config::limit& l) {
  switch (l.by) {
    case config::identity_kind::api_key:
      return "api_key";
    case config::identity_kind::user:
      return "user";
    case config::identity_kind::ip:
      return "ip";
    case config::identity_kind::global:
      return "global";
    case config::identity_kind::header:
      return "header:" + l.header_name;
  }
  return "unknown";
}

const char* policy_text(config::failure_policy p) {
  switch (p) {
    case config::failure_policy::fail_open:
      return "fail_open";
    case config::failure_policy::fail_closed:
      return "fail_closed";
    case config::failure_policy::local:
      return "local";
  }
  return "unknown";
}

json::object params_json(const config::limit_params& p) {
  json::object o;
  o["rate"] = std::to_string(p.rate.count) + "/" +
              (p.rate.unit != config::calendar_unit::none
                   ? std::string(limiter::calendar_unit_name(p.rate.unit))
                   : config::duration_text(p.rate.period));
  o["burst"] = p.burst != 0 ? p.burst : p.rate.count;
  return o;
}

/// A limit's `charge:` as the rules file says it.
json::object charge_json(const config::charge_rule& c) {
  json::object o;
  if (c.what == config::charge_rule::kind::when_status) {
    json::array statuses;
    for (unsigned k = 1; k <= 5; ++k)
      if (c.classes & (1u << k)) statuses.emplace_back(std::to_string(k) + "xx");
    for (unsigned s : c.statuses) statuses.emplace_back(s);
    o["when_status"] = std::move(statuses);
    return o;
  }
  if (c.reserve_header.empty()) {
    o["reserve"] = c.reserve;
  } else {
    o["reserve"] = json::object{{"header", c.reserve_header}, {"max", c.reserve_max}};
  }
  if (c.settle_header.empty()) {
    o["settle"] = json::object{{"json", c.settle_path_text}};
  } else {
    o["settle"] = json::object{{"header", c.settle_header}};
  }
  if (c.fallback < 0) {
    o["fallback"] = "reserve";
  } else {
    o["fallback"] = c.fallback;
  }
  return o;
}

}  // namespace

json::object limit_json(const config::limit& l) {
  json::object o;
  o["name"] = l.name;
  o["by"] = by_text(l);
  o["algorithm"] = config::algorithm_name(l.algorithm);
  o["mode"] = l.mode == config::limit_mode::shadow ? "shadow" : "enforce";
  if (l.algorithm == config::algorithm::concurrency) {
    // (Its count and period hold max_in_flight and slot_ttl: config::limit's algorithm doc.)
    o["max_in_flight"] = l.params.rate.count;
    o["slot_ttl_ms"] = l.params.rate.period.count();
  } else if (l.has_default_params) {
    auto p = params_json(l.params);
    o["rate"] = p["rate"];
    o["burst"] = p["burst"];
  }
  if (!l.plan_overrides.empty()) {
    json::object plans;
    for (const auto& [plan, p] : l.plan_overrides) {
      auto po = params_json(p);
      po["guarantee"] = limiter::guarantee(l.algorithm, p) + limiter::hot_key_caveats(l, p);
      plans[plan] = std::move(po);
    }
    o["plans"] = std::move(plans);
  }
  if (l.lease > 0) {
    o["lease"] = l.lease;
    o["lease_time_ms"] = l.lease_time.count();
  }
  if (l.shards > 1) o["shards"] = l.shards;
  if (l.region_share < 1.0) o["region_share"] = l.region_share;
  if (l.block.count() > 0) o["block_ms"] = l.block.count();
  if (l.algorithm == config::algorithm::calendar)
    o["utc_offset"] = limiter::utc_offset_text(l.utc_offset_minutes);
  if (l.warn_at_bp > 0) o["warn_at_percent"] = static_cast<double>(l.warn_at_bp) / 100.0;
  if (l.charge.what != config::charge_rule::kind::none) o["charge"] = charge_json(l.charge);
  // The limit's stated guarantee (DESIGN.md: "every limit states what it guarantees"), in
  // the limiter room's words: defaults, then each plan override.
  o["guarantee"] = limiter::guarantee(l);
  return o;
}

std::string config_json(const config::rules& rules, std::uint64_t generation,
                        const std::string& source_file, const std::string& last_reload_error) {
  json::object o;
  o["generation"] = generation;
  o["source"] = source_file;
  if (last_reload_error.empty()) {
    o["last_reload_error"] = nullptr;
  } else {
    o["last_reload_error"] = last_reload_error;
  }
  // Start-up settings as the rules file gives them (a --listen, --admin or --workers
  // override is in the start-up log line instead).
  o["listen"] = rules.listen_host + ":" + std::to_string(rules.listen_port);
  if (!rules.admin_host.empty())
    o["admin"] = rules.admin_host + ":" + std::to_string(rules.admin_port);
  if (!rules.admin.token.empty()) {  // where the token comes from, never the token
    json::object auth;
    if (!rules.admin.token_env.empty()) auth["token_env"] = rules.admin.token_env;
    if (!rules.admin.token_file.empty()) auth["token_file"] = rules.admin.token_file;
    auth["metrics_open"] = rules.admin.metrics_open;
    o["admin_auth"] = std::move(auth);
  }
  o["workers"] = rules.workers;
  {
    const auto& c = rules.client;
    json::object client;
    client["header_timeout_ms"] = c.header_timeout.count();
    client["keepalive_timeout_ms"] = c.keepalive_timeout.count();
    client["body_timeout_ms"] = c.body_timeout.count();
    client["body_min_rate"] = c.body_min_rate;
    client["send_timeout_ms"] = c.send_timeout.count();
    if (c.max_connections)
      client["max_connections"] = c.max_connections;
    else
      client["max_connections"] = "auto";
    client["max_headers"] = c.max_headers;
    client["max_header_size"] = c.max_header_size;
    client["max_uri_length"] = c.max_uri_length;
    o["client"] = std::move(client);
  }
  o["drain_timeout_ms"] = rules.drain_timeout.count();
  if (rules.tls.enabled) {
    // File names only (never a passphrase): what a reload reads again.
    const auto& t = rules.tls;
    json::object tls;
    json::array certs;
    for (const auto& c : t.certificates)
      certs.emplace_back(json::object{{"cert", c.cert.path}, {"key", c.key.path}});
    tls["certificates"] = std::move(certs);
    tls["verify_client"] = t.verify_client == config::client_verify::require    ? "require"
                           : t.verify_client == config::client_verify::optional ? "optional"
                                                                                : "off";
    if (!t.client_ca.path.empty()) tls["client_ca"] = t.client_ca.path;
    if (!t.key_passphrase_env.empty()) tls["key_passphrase_env"] = t.key_passphrase_env;
    if (!t.key_passphrase_file.path.empty())
      tls["key_passphrase_file"] = t.key_passphrase_file.path;
    o["tls"] = std::move(tls);
  }
  {
    json::object store;
    const bool redis = rules.store.redis();
    const bool sentinel = rules.store.type == config::store_settings::kind::redis_sentinel;
    const bool cluster = rules.store.type == config::store_settings::kind::redis_cluster;
    store["type"] = sentinel  ? "redis-sentinel"
                    : cluster ? "redis-cluster"
                    : redis   ? "redis"
                              : "memory";
    if (cluster) {
      json::array nodes;
      for (const auto& a : rules.store.nodes)
        nodes.emplace_back(a.host + ":" + std::to_string(a.port));
      store["nodes"] = std::move(nodes);
    } else if (sentinel) {
      json::array sentinels;
      for (const auto& a : rules.store.sentinels)
        sentinels.emplace_back(a.host + ":" + std::to_string(a.port));
      store["sentinels"] = std::move(sentinels);
      store["master"] = rules.store.master_name;
      store["sentinel_timeout_ms"] = rules.store.sentinel_timeout.count();
    } else if (redis) {
      store["address"] = rules.store.host + ":" + std::to_string(rules.store.port);
    }
    if (redis) {
      const bool hash = rules.store.layout == config::store_settings::layout_kind::hash;
      store["layout"] = hash ? "hash" : "key";
      if (hash) store["hash_groups"] = rules.store.hash_groups;
      store["over_limit_cache"] = rules.store.over_limit_cache;
      store["max_batch"] = rules.store.max_batch;
    } else {
      store["max_buckets"] = rules.store.max_buckets;
    }
    store["timeout_ms"] = rules.store.timeout.count();
    o["store"] = std::move(store);
  }
  {
    json::array headers;
    if (rules.headers.x_ratelimit) headers.emplace_back("x-ratelimit");
    if (rules.headers.ietf) headers.emplace_back("ietf");
    o["headers"] = std::move(headers);
  }
  {
    json::object ups;
    for (const auto& [name, u] : rules.upstreams) {
      json::object up{{"url", u.url}};
      if (u.http2) up["http2"] = true;
      if (u.tls) {
        up["verify"] = u.verify;
        up["ca_file"] =
            u.ca_file.path.empty() ? json::value("system") : json::value(u.ca_file.path);
      }
      ups[name] = std::move(up);
    }
    o["upstreams"] = std::move(ups);
  }
  {
    json::object plans;
    for (const auto& [name, p] : rules.plans) {
      json::array limits;
      for (const auto& l : p.limits) limits.emplace_back(limit_json(l));
      plans[name] = json::object{{"limits", std::move(limits)}};
    }
    o["plans"] = std::move(plans);
  }
  o["api_keys"] = rules.api_keys.size();  // a count: the keys themselves are secrets
  {
    json::array routes;
    for (const auto& r : rules.routes) {
      json::object ro;
      ro["name"] = r.name;
      json::object match;
      switch (r.match.kind) {
        case config::path_kind::prefix:
          match["path_prefix"] = r.match.path_prefix;
          break;
        case config::path_kind::exact:
          match["path"] = r.match.path;
          break;
        case config::path_kind::glob:
          match["path_glob"] = r.match.path;
          break;
      }
      if (!r.match.host.empty()) match["host"] = r.match.host;
      json::array methods;
      for (const auto& m : r.match.methods) methods.emplace_back(m);
      match["methods"] = std::move(methods);
      ro["match"] = std::move(match);
      ro["upstream"] = r.upstream;
      ro["cost"] = r.cost;
      ro["on_store_failure"] = policy_text(r.on_store_failure);
      json::array limits;
      for (const auto& l : r.limits) limits.emplace_back(limit_json(l));
      ro["limits"] = std::move(limits);
      routes.emplace_back(std::move(ro));
    }
    o["routes"] = std::move(routes);
  }
  // A string from the command line (the file name) or a diagnostic may hold ill-formed
  // UTF-8; U+FFFD keeps the document JSON (RFC 8259 §8.1).
  return utf8::make_valid(json::serialize(o));
}

namespace {

http::response reply(unsigned version, bhttp::status status, std::string body,
                     std::string_view type) {
  http::response res{status, version};
  res.set(bhttp::field::server, "sluice");
  res.set(bhttp::field::cache_control, "no-store");
  res.set(bhttp::field::content_type, type);
  res.body() = std::move(body);
  return res;
}

/// Reads `GET /admin/explain`'s query (percent-decoded, `+` as a space) into `q`; false with
/// `bad` saying why on a missing `path`, an unknown parameter or one given twice.
bool parse_explain_query(std::string_view target, explain_query& q, std::string& bad) {
  const auto at = target.find('?');
  if (at == std::string_view::npos) {
    bad = "explain needs ?path=/the/path (and method=, api_key=, ip=, header.NAME=)";
    return false;
  }
  auto parsed = boost::urls::parse_origin_form(target);
  if (!parsed) {
    bad = "explain: the query cannot be read: " + parsed.error().message();
    return false;
  }
  bool have_path = false, have_method = false, have_key = false, have_ip = false;
  auto once = [&bad](bool& seen, std::string_view name) {
    if (seen) bad = "explain: " + std::string(name) + " given twice";
    seen = true;
    return bad.empty();
  };
  boost::urls::encoding_opts plus;
  plus.space_as_plus = true;                   // a form's encoding (HTML 4.01 §17.13.4)
  for (const auto p : parsed->params(plus)) {  // decoded copies
    const std::string& key = p.key;
    const std::string& value = p.value;
    if (key == "path") {
      if (!once(have_path, key)) return false;
      q.path = value;
    } else if (key == "method") {
      if (!once(have_method, key)) return false;
      q.method = value;
    } else if (key == "api_key") {
      if (!once(have_key, key)) return false;
      q.api_key = value;
    } else if (key == "ip") {
      if (!once(have_ip, key)) return false;
      q.ip = value;
    } else if (key.starts_with("header.") && key.size() > 7) {
      q.headers.emplace_back(key.substr(7), value);
    } else {
      bad = "explain: unknown parameter '" + key + "' (path, method, api_key, ip, header.NAME)";
      return false;
    }
  }
  if (q.path.empty() || q.path.front() != '/') {
    bad = "explain needs path= starting with '/'";
    return false;
  }
  if (!q.method.empty() && bhttp::string_to_verb(q.method) == bhttp::verb::unknown) {
    bad = "explain: method '" + q.method + "' is not an HTTP method";
    return false;
  }
  if (!q.ip.empty()) {
    boost::system::error_code ec;
    asio::ip::make_address(q.ip, ec);
    if (ec) {
      bad = "explain: ip '" + q.ip + "' is not an IP address (IPv4, or IPv6 without brackets)";
      return false;
    }
  }
  return true;
}

/// Reads `POST /admin/unblock`'s query into `q`; false with `bad` saying why (no `limit=`,
/// an unknown or repeated parameter, an `ip=` that is not an address).
bool parse_unblock_query(std::string_view target, unblock_query& q, std::string& bad) {
  const auto at = target.find('?');
  if (at == std::string_view::npos) {
    bad = "unblock needs ?limit=NAME and the caller (api_key=, ip=, user= or header=)";
    return false;
  }
  auto parsed = boost::urls::parse_origin_form(target);
  if (!parsed) {
    bad = "unblock: the query cannot be read: " + parsed.error().message();
    return false;
  }
  bool have_limit = false, have_key = false, have_ip = false, have_user = false,
       have_header = false;
  boost::urls::encoding_opts plus;
  plus.space_as_plus = true;
  for (const auto p : parsed->params(plus)) {
    const std::string& key = p.key;
    bool* seen = key == "limit"     ? &have_limit
                 : key == "api_key" ? &have_key
                 : key == "ip"      ? &have_ip
                 : key == "user"    ? &have_user
                 : key == "header"  ? &have_header
                                    : nullptr;
    if (seen == nullptr) {
      bad = "unblock: unknown parameter '" + key + "' (limit, api_key, ip, user, header)";
      return false;
    }
    if (*seen) {
      bad = "unblock: " + key + " given twice";
      return false;
    }
    *seen = true;
    std::string& to = key == "limit"     ? q.limit
                      : key == "api_key" ? q.api_key
                      : key == "ip"      ? q.ip
                      : key == "user"    ? q.user
                                         : q.header;
    to = p.value;
  }
  if (q.limit.empty()) {
    bad = "unblock needs limit=NAME";
    return false;
  }
  if (!q.ip.empty()) {
    boost::system::error_code ec;
    asio::ip::make_address(q.ip, ec);
    if (ec) {
      bad = "unblock: ip '" + q.ip + "' is not an IP address (IPv4, or IPv6 without brackets)";
      return false;
    }
  }
  return true;
}

/// The value of `v` after the auth scheme `scheme` (lower case) and its spaces, when `v` starts
/// with it (RFC 9110 §11.1: the scheme in any case); nullopt otherwise.
std::optional<std::string_view> after_scheme(std::string_view v, std::string_view scheme) {
  if (v.size() <= scheme.size() || v[scheme.size()] != ' ') return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(v[i])) != scheme[i]) return std::nullopt;
  v.remove_prefix(scheme.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

/// The token a request presents, "" when none: `Authorization: Bearer <token>` (RFC 6750
/// §2.1), or `Authorization: Basic <base64 of user:token>` (RFC 7617; any user name, the
/// token as the password) so that a browser can open the status page after its login prompt.
std::string given_token(const http::request& req) {
  auto it = req.find(bhttp::field::authorization);
  if (it == req.end()) return {};
  const std::string_view v = it->value();
  if (auto bearer = after_scheme(v, "bearer")) return std::string(*bearer);
  auto basic = after_scheme(v, "basic");
  if (!basic || basic->empty() || basic->size() % 4 != 0 || basic->size() > 4096) return {};
  std::string decoded(basic->size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                reinterpret_cast<const unsigned char*>(basic->data()),
                                static_cast<int>(basic->size()));
  if (n < 0) return {};
  std::size_t len = static_cast<std::size_t>(n);
  for (std::size_t i = basic->size(); i > 0 && (*basic)[i - 1] == '='; --i) --len;  // padding
  decoded.resize(len);
  const auto colon = decoded.find(':');
  return colon == std::string::npos ? std::string{} : decoded.substr(colon + 1);
}

/// Whether `given` is `token`, in time that depends on neither: both are hashed (SHA-256) and
/// the digests compared with CRYPTO_memcmp, so not even the token's length leaks.
bool same_token(std::string_view given, std::string_view token) {
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

class admin_handler final : public http::buffered_handler {
 public:
  admin_handler(std::shared_ptr<admin_backend> backend, std::shared_ptr<const rate_history> rates)
      : backend_(std::move(backend)), rates_(std::move(rates)) {}

  asio::awaitable<http::response> respond(http::request req,
                                          const http::request_context& ctx) override {
    co_return answer(req, ctx);
  }

  /// Requests refused for a missing or wrong token since start.
  std::uint64_t auth_failures() const { return auth_failures_.load(std::memory_order_relaxed); }

 private:
  /// Whether `req` for `path` may be answered under the token of the rules in force (`admin:`'s
  /// token_env / token_file): always for /healthz and /readyz (probes carry no secret), for
  /// /metrics when metrics_open, else only with the token (given_token()). A refusal is
  /// counted and logged (at most one line a second).
  bool authorized(const http::request& req, std::string_view path, const http::request_context& ctx,
                  bool& token_given) {
    token_given = false;
    if (path == "/healthz" || path == "/readyz") return true;
    const auto rules = backend_->current_config().rules;
    if (!rules || rules->admin.token.empty()) return true;
    if (path == "/metrics" && rules->admin.metrics_open) return true;
    const std::string given = given_token(req);
    token_given = !given.empty();
    if (token_given && same_token(given, rules->admin.token)) return true;
    auth_failures_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t suppressed = 0;
    if (auth_log_.admit(suppressed)) {
      spdlog::warn("admin: {} {} from {} refused: {} ({} more refusals not logged)",
                   std::string_view(req.method_string()), path, ctx.peer_text,
                   token_given ? "wrong token" : "no token", suppressed);
    }
    return false;
  }

  http::response answer(const http::request& req, const http::request_context& ctx) {
    const unsigned v = req.version();
    std::string_view path = req.target();
    path = path.substr(0, path.find('?'));
    if (bool token_given = false; !authorized(req, path, ctx, token_given)) {
      auto res = http::problem(v, bhttp::status::unauthorized, "Unauthorized",
                               token_given ? "the token is not the admin listener's"
                                           : "this admin path needs Authorization: Bearer <token>");
      // RFC 6750 §3: the challenge, with error="invalid_token" when a token was wrong; and
      // RFC 7617's Basic, so that a browser prompts (the token as the password).
      res.set(bhttp::field::www_authenticate,
              token_given ? R"(Bearer realm="sluice admin", error="invalid_token")"
                          : R"(Bearer realm="sluice admin")");
      res.insert(bhttp::field::www_authenticate, R"(Basic realm="sluice admin", charset="UTF-8")");
      res.set(bhttp::field::cache_control, "no-store");
      return res;
    }
    const auto method = req.method();
    const bool get = method == bhttp::verb::get || method == bhttp::verb::head;
    auto not_allowed = [&](std::string_view allow) {
      auto res = reply(v, bhttp::status::method_not_allowed, "method not allowed\n", "text/plain");
      res.set(bhttp::field::allow, allow);
      return res;
    };
    try {
      if (path == "/") {
        if (!get) return not_allowed("GET, HEAD");
        return reply(v, bhttp::status::ok, status_page_html(*backend_, req.target(), rates_.get()),
                     "text/html; charset=utf-8");
      }
      if (path == "/admin/top") {
        if (!get) return not_allowed("GET, HEAD");
        auto [status, body] = top_answer(*backend_, req.target());
        return reply(v, static_cast<bhttp::status>(status), std::move(body) + "\n",
                     "application/json");
      }
      if (path == "/healthz") {
        if (!get) return not_allowed("GET, HEAD");
        return reply(v, bhttp::status::ok, "ok\n", "text/plain");
      }
      if (path == "/readyz") {
        if (!get) return not_allowed("GET, HEAD");
        if (backend_->ready()) return reply(v, bhttp::status::ok, "ready\n", "text/plain");
        const std::string why = backend_->not_ready_reason();
        return reply(v, bhttp::status::service_unavailable,
                     why.empty() ? std::string("not ready\n") : "not ready: " + why + "\n",
                     "text/plain");
      }
      if (path == "/admin/config") {
        if (!get) return not_allowed("GET, HEAD");
        auto view = backend_->current_config();
        return reply(
            v, bhttp::status::ok,
            config_json(*view.rules, view.generation, view.source_file, view.last_reload_error) +
                "\n",
            "application/json");
      }
      if (path == "/admin/reload") {
        if (method != bhttp::verb::post) return not_allowed("POST");
        auto r = backend_->reload();
        json::object o;
        o["reloaded"] = r.ok;
        o["generation"] = r.generation;
        if (!r.ok) {
          json::array d;
          for (auto& line : r.diagnostics) d.emplace_back(line);
          o["diagnostics"] = std::move(d);
        }
        return reply(v, r.ok ? bhttp::status::ok : bhttp::status::bad_request,
                     utf8::make_valid(json::serialize(o)) + "\n", "application/json");
      }
      if (path == "/admin/explain") {
        if (!get) return not_allowed("GET, HEAD");
        explain_query q;
        std::string bad;
        if (!parse_explain_query(req.target(), q, bad)) {
          return reply(v, bhttp::status::bad_request, bad + "\n", "text/plain");
        }
        auto e = backend_->explain(q);
        if (e.json)
          return reply(v, bhttp::status::ok, std::move(*e.json) + "\n", "application/json");
        return reply(v, bhttp::status::service_unavailable, e.error + "\n", "text/plain");
      }
      if (path == "/admin/unblock") {
        if (method != bhttp::verb::post) return not_allowed("POST");
        unblock_query q;
        std::string bad;
        if (!parse_unblock_query(req.target(), q, bad)) {
          json::object o;
          o["error"] = bad;
          return reply(v, bhttp::status::bad_request, utf8::make_valid(json::serialize(o)) + "\n",
                       "application/json");
        }
        auto a = backend_->unblock(q);
        return reply(v, static_cast<bhttp::status>(a.status), std::move(a.json) + "\n",
                     "application/json");
      }
      if (path == "/metrics") {
        // Prometheus exposition (metrics.hpp), built from a fresh sample per scrape.
        if (!get) return not_allowed("GET, HEAD");
        if (auto text = backend_->metrics()) {
          return reply(v, bhttp::status::ok, std::move(*text), exposition_content_type);
        }
      }
      return reply(v, bhttp::status::not_found, "not found\n", "text/plain");
    } catch (const std::exception& e) {
      spdlog::error("admin {} {}: {}", req.method_string(), path, e.what());
      return reply(v, bhttp::status::internal_server_error, "internal error\n", "text/plain");
    }
  }

  std::shared_ptr<admin_backend> backend_;
  std::shared_ptr<const rate_history> rates_;
  std::atomic<std::uint64_t> auth_failures_{0};
  log_throttle auth_log_;
};

}  // namespace

/// The admin listener's client limits: the defaults, and a small connection cap (a scraper
/// and an operator need a few connections; a flood of them must not take the process's
/// descriptors).
http::session_limits admin_limits() {
  http::session_limits l;
  l.max_connections = 256;
  return l;
}

struct admin_server::impl {
  asio::io_context ioc{1};
  std::shared_ptr<admin_backend> backend;
  std::shared_ptr<rate_history> rates;
  asio::steady_timer sampler{ioc};
  std::shared_ptr<admin_handler> handler;
  std::unique_ptr<http::server> server;
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;

  /// Takes one sample of the route counters for the rate graphs and schedules the next one
  /// step later (from the previous deadline, so the steps do not drift). Listener thread.
  void sample() {
    try {
      if (auto facts = backend->status()) {
        const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now().time_since_epoch());
        rates->sample(facts->sample.routes, now.count());
      }
    } catch (const std::exception& e) {
      spdlog::warn("admin: the status page's rate sample failed: {}", e.what());
    }
    const auto now = std::chrono::steady_clock::now();
    auto next = sampler.expiry() + rates->step();
    if (next <= now) next = now + rates->step();
    sampler.expires_at(next);
    sampler.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) sample();
    });
  }
};

admin_server::admin_server(asio::ip::tcp::endpoint endpoint, std::shared_ptr<admin_backend> backend)
    : impl_(std::make_unique<impl>()) {
  const auto rules = backend->current_config().rules;
  const auto step = rules ? rules->status_graph_step : std::chrono::milliseconds{10000};
  const std::size_t minutes = rules ? rules->status_graph_minutes : 10;
  impl_->rates = std::make_shared<rate_history>(
      step, std::max<std::size_t>(1, minutes * 60'000 / static_cast<std::size_t>(step.count())));
  impl_->backend = backend;
  impl_->handler = std::make_shared<admin_handler>(std::move(backend), impl_->rates);
  impl_->server =
      std::make_unique<http::server>(impl_->ioc, endpoint, impl_->handler, admin_limits(), 0,
                                     /*share_port=*/false);  // a port in use is an error
}

admin_server::~admin_server() {
  stop();
}

void admin_server::start() {
  if (impl_->thread.joinable()) return;
  impl_->guard = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
      impl_->ioc.get_executor());
  impl_->server->start();
  asio::post(impl_->ioc, [p = impl_.get()] { p->sample(); });
  impl_->thread = std::thread([p = impl_.get()] { p->ioc.run(); });
}

void admin_server::stop() {
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->ioc, [p = impl_.get()] {
    p->server->stop();
    p->sampler.cancel();
    p->guard.reset();
    p->ioc.stop();
  });
  impl_->thread.join();
}

asio::ip::tcp::endpoint admin_server::local_endpoint() const {
  return impl_->server->local_endpoint();
}

std::uint64_t admin_server::auth_failures() const {
  return impl_->handler->auth_failures();
}

}  // namespace sluice::observability
