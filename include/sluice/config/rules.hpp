// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The rules model: plain structs built from a rules file (see DESIGN.md, "The rules file").
/// A `rules` value is immutable once loaded and is shared read-only between workers as a
/// snapshot (`std::shared_ptr<const rules>`).

#include "sluice/config/usage_path.hpp"
#include "sluice/string_hash.hpp"

#include <boost/unordered/unordered_flat_map.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::config {

/// Largest integer a limit parameter may take: Lua numbers are doubles, exact up to 2^53.
inline constexpr std::int64_t max_exact_integer = std::int64_t{1} << 53;

/// The longest `block:` (penalty box) a limit may ask for: 7 days.
inline constexpr std::chrono::milliseconds max_block{7LL * 24 * 3600 * 1000};

/// The limiting algorithm of one limit (`algorithm:` field).
/// `calendar`: a count per calendar day, ISO week or month (limiter/calendar.hpp).
/// `concurrency`: at most `max_in_flight` requests of one key in flight at once
/// (limiter/concurrency.hpp); its limit_params hold `max_in_flight` as the rate's count and
/// `slot_ttl` as the rate's period (and the burst), so every step that reads a limit's
/// count and period (the Limit, the guarantee, a reload's comparison) reads them.
enum class algorithm {
  token_bucket,
  fixed_window,
  sliding_window,
  sliding_log,
  gcra,
  calendar,
  concurrency
};

/// The period of a calendar quota (`rate: N/day | N/week | N/month`, algorithm calendar).
/// The numbers are the script's unit ids (lua/calendar.lua).
enum class calendar_unit : std::int8_t {
  none = 0,   ///< not a calendar rate
  day = 1,    ///< from local midnight to the next
  week = 2,   ///< ISO 8601 week: from Monday 00:00 local to the next Monday
  month = 3,  ///< from the 1st 00:00 local to the 1st of the next month (28-31 days)
};

/// The rules-file name of algorithm `a` (`token_bucket`, `fixed_window`, ..., `calendar`,
/// `concurrency`): what `algorithm:` says, diagnostics and `/admin/config` print.
const char* algorithm_name(algorithm a);

/// What a limit counts by (`by:` field): `api_key | user | ip | global | header:NAME`.
enum class identity_kind { api_key, user, ip, global, header };

/// Per-route behaviour when the counter store cannot answer (`on_store_failure:`).
enum class failure_policy { fail_open, fail_closed, local };

/// `mode:` of a limit: enforced, or evaluated and reported only.
enum class limit_mode { enforce, shadow };

/// What happens to a request whose API key is absent or not in the directory.
enum class unknown_key_policy { anonymous, reject };

/// Which forwarding header names the client behind `trusted_proxies` (`identity.forwarded:`).
enum class forwarded_header {
  x_forwarded_for,  ///< `x-forwarded-for` (default): the de-facto list of addresses
  rfc7239,          ///< `rfc7239`: the `for=` parameters of `Forwarded` (RFC 7239); XFF ignored
};

/// A rate `N/DURATION`: `count` units per `period`.
struct rate {
  std::int64_t count = 0;               ///< units per period, 1 .. 2^53
  std::chrono::milliseconds period{0};  ///< > 0; a calendar rate: its longest period
  /// A calendar rate (`N/day`, `N/week`, `N/month` of algorithm calendar): the period is
  /// the calendar's, not `period` (which then holds the longest such period: 1, 7, 31 days).
  calendar_unit unit = calendar_unit::none;
  /// A calendar rate: the limit's `utc_offset` in minutes east of UTC, -840 .. 840 (the
  /// loader copies it into every rate of the limit).
  std::int32_t utc_offset_minutes = 0;
};

/// Rate and burst of a limit, possibly overridden for one plan.
struct limit_params {
  struct rate rate;
  std::int64_t burst = 0;  ///< bucket capacity in units (token bucket); default: rate.count
};

/// `charge:` of a limit: its cost is known only after the response (DESIGN.md, "Costs known
/// later"). Either a response filter (`when_status`) or a reservation settled from the
/// response (`reserve` + `settle`); `none` for every other limit.
struct charge_rule {
  enum class kind : std::uint8_t {
    none,         ///< the request's cost, spent at admission (every limit without `charge:`)
    when_status,  ///< `when_status: [...]`: spent at admission, refunded unless the status matches
    settle,       ///< `reserve` / `settle` / `fallback`: reserved, then settled at the response
  } what = kind::none;

  /// when_status: the listed statuses (100..599) ...
  std::vector<unsigned> statuses;
  /// ... and classes: bit k set for `kxx` (1 .. 5).
  unsigned classes = 0;
  /// Whether a final response status counts (when_status).
  bool matches(unsigned status) const {
    if (status >= 100 && status <= 599 && (classes & (1u << (status / 100))) != 0) return true;
    for (unsigned s : statuses)
      if (s == status) return true;
    return false;
  }

  /// settle: the fixed reservation in units (`reserve: N`), used when reserve_header is empty.
  std::int64_t reserve = 0;
  /// settle: the request header a reservation is read from (`reserve: {header: X, max: M}`),
  /// capped at reserve_max units.
  std::string reserve_header;
  std::int64_t reserve_max = 0;
  /// settle: the response header the actual cost is read from (`settle: {header: X}`), or
  /// (empty) the JSON path in the body (`settle: {json: PATH}`, settle_path_text as written).
  std::string settle_header;
  std::vector<usage_path_step> settle_path;
  std::string settle_path_text;
  /// settle: what a response whose cost cannot be read costs: the reservation (`fallback:
  /// reserve`, the default, fallback < 0) or this many units.
  std::int64_t fallback = -1;

  bool operator==(const charge_rule&) const = default;
};

/// One limit: a named bucket per caller identity. Two routes share a bucket only by naming
/// the same limit (DESIGN.md, "A limit's fields").
struct limit {
  std::string name;  ///< unique; the bucket's identity in the store
  identity_kind by = identity_kind::api_key;
  std::string header_name;  ///< for `by: header:NAME` (as written)
  enum algorithm algorithm = algorithm::token_bucket;
  limit_params params;                                 ///< defaults for every caller
  std::map<std::string, limit_params> plan_overrides;  ///< `plans:` overrides, by plan name
  limit_mode mode = limit_mode::enforce;
  int line = 0;  ///< 1-based line in the rules file (diagnostics)
  /// False when the limit has no top-level `rate:` and only `plans:` overrides (DESIGN.md's
  /// `search_key`): it then applies only to callers whose plan has an override, and `params`
  /// is meaningless (count 0).
  bool has_default_params = true;
  /// `preflight:` whether a CORS preflight (answered or passed through by the gateway) is
  /// charged to this limit, at the route's cost. Default: true for `by: ip` and `by: global`,
  /// false otherwise (a preflight carries no credentials, so it has no key or user).
  bool preflight = false;
  /// Set by the loader on `store.type: redis-cluster` for an enforced limit that a request
  /// can carry with another enforced limit: their buckets may live in different hash slots,
  /// so such a request is decided in two steps (store/redis_cluster_store.hpp), and the
  /// limit's stated guarantee says what that costs.
  bool split_on_cluster = false;
  /// `lease:` token leasing (token_bucket only; limiter/lease_book.hpp): the most tokens a
  /// worker takes from the bucket in one store round trip and then spends itself; 0 = none.
  /// At most the burst of every plan's bucket (after `shards` and `region_share`).
  std::int64_t lease = 0;
  /// `lease_time:` how long a worker spends a lease before its tokens go back (default 250ms).
  std::chrono::milliseconds lease_time{250};
  /// `shards:` a `by: global` token bucket split into this many buckets, each with 1/S of
  /// the rate (N per S × P, exact) and ⌊burst / S⌋ of the burst, spread over the store's
  /// keys (so over a cluster's masters); each request is charged to one of them. 1 = one.
  std::uint32_t shards = 1;
  /// `region_share:` the share of the limit this region's gateways enforce against their own
  /// store (0 < share <= 1; default `store.region_share`): the rate is N per ⌈P / share⌉ and
  /// the burst ⌊burst × share⌋.
  double region_share = 1.0;
  /// `block:` the penalty box (limiter/block.hpp): once this limit refuses a key, the key
  /// stays refused by it for this long (1s .. 7d), exactly across instances (the block lives
  /// in the store). 0 = none. Never on a shadow limit, nor with `lease` or `shards`.
  std::chrono::milliseconds block{0};
  /// `warn_at:` the near-limit warning threshold in basis points of the Limit (8000 = 80 %),
  /// 1 .. 9999; 0 = none. A response whose usage of this (enforced) limit after the request
  /// is at least warn_at × Limit names it in `X-RateLimit-Warning` (limiter/decision.hpp).
  std::int32_t warn_at_bp = 0;
  /// `utc_offset:` (algorithm calendar) minutes east of UTC, -840 .. 840; also in every rate
  /// of the limit (rate::utc_offset_minutes), where the arithmetic reads it.
  std::int32_t utc_offset_minutes = 0;
  /// `charge:` a cost known after the response (charge_rule); none by default.
  charge_rule charge;

  /// The parameters that apply to a caller on plan `plan` (the override, or the defaults).
  /// Check `applies_to(plan)` first when `has_default_params` may be false.
  const limit_params& params_for(const std::string& plan) const {
    auto it = plan_overrides.find(plan);
    return it == plan_overrides.end() ? params : it->second;
  }

  /// The parameters for a caller on plan `plan`, or nullptr when this limit does not apply to
  /// that plan (no override for it and no default rate).
  const limit_params* find_params(const std::string& plan) const {
    auto it = plan_overrides.find(plan);
    if (it != plan_overrides.end()) return &it->second;
    return has_default_params ? &params : nullptr;
  }

  /// `p` (this limit's own parameters or a plan's) as one bucket of this limit enforces
  /// it: scaled to `region_share` (token bucket: rate N per ⌈P / share⌉ ms and burst
  /// ⌊burst × share⌋; window: count ⌊N × share⌋; each at least 1), then for `shards` S one
  /// shard's part (rate N per S × P, exact; burst ⌊burst / S⌋, at least 1). `p` itself when
  /// the limit has neither.
  limit_params enforced(const limit_params& p) const;

  /// Whether this limit applies to callers on plan `plan`.
  bool applies_to(const std::string& plan) const { return find_params(plan) != nullptr; }
};

/// A plan: limits that follow a caller on every route.
struct plan {
  std::string name;
  std::vector<limit> limits;
};

/// How a route's path is compared with the canonical request path.
enum class path_kind {
  prefix,  ///< `path_prefix:` plain string prefix (the default, with "/")
  exact,   ///< `path:` the whole path
  glob,    ///< `path_glob:` segments; `*` is one whole segment, `**` any number (0 or more)
};

/// How a route matches a request. Empty `methods` means any method; a route allowing GET
/// also takes HEAD (RFC 9110 §9.3.2).
struct route_match {
  path_kind kind = path_kind::prefix;
  /// The pattern of `kind`: canonical, starts with '/'. Kept in `path_prefix` for prefix
  /// routes (the historical name) and in `path` for exact and glob routes.
  std::string path_prefix;           ///< canonical path prefix, starts with '/'
  std::string path;                  ///< exact path or glob pattern
  std::vector<std::string> methods;  ///< upper-case method names
  std::string host;                  ///< lower-case host name without port; "" = any host
};

/// One `cors.origins` entry: an exact origin, or a pattern (Fetch standard §3.2.5: an
/// origin is serialised as `scheme://host[:port]`, lower-case, without a default port).
struct origin_pattern {
  std::string text;    ///< as written
  bool any = false;    ///< `*`: every origin
  std::string scheme;  ///< `http` or `https`
  /// The host, or with `*.` removed the suffix that a wildcard host must end with
  /// (`*.example.com`: one or more labels before `.example.com`).
  std::string host;
  bool any_subdomain = false;  ///< the host was written `*.suffix`
  std::string port;            ///< "" = the scheme's default port; "*" = any port
};

/// What the gateway does with a CORS preflight (`cors.preflight:`).
enum class preflight_mode {
  answer,   ///< the gateway answers it (204) from the policy; the upstream never sees it
  forward,  ///< it is forwarded to the upstream (still never authenticated or charged per key)
};

/// A `cors:` block (globally or on a route): the CORS protocol of the Fetch standard, §3.2.
struct cors_policy {
  std::vector<origin_pattern> origins;  ///< allowed origins; empty = none
  /// Methods a preflight may ask for (`Access-Control-Allow-Methods`); default GET, HEAD, POST.
  std::vector<std::string> methods{"GET", "HEAD", "POST"};
  /// Request headers a preflight may ask for (`Access-Control-Allow-Headers`), as written;
  /// `*` (without credentials) allows any. Default none beyond the CORS-safelisted ones.
  std::vector<std::string> headers;
  /// Response headers a page may read besides the rate-limit ones (which are always exposed).
  std::vector<std::string> expose_headers;
  /// `Access-Control-Max-Age` in seconds; -1 = not sent (browsers then cache for 5 s).
  std::int64_t max_age_seconds = -1;
  bool credentials = false;  ///< `Access-Control-Allow-Credentials: true`; never with `*`
  preflight_mode preflight = preflight_mode::answer;
  int line = 0;  ///< 1-based line of the block (diagnostics)
};

/// A size setting without a limit (`unlimited` in a rules file).
inline constexpr std::uint64_t unlimited_size = ~std::uint64_t{0};

/// A route: first match wins (DESIGN.md, "routes").
struct route {
  std::string name;
  route_match match;
  std::string upstream;   ///< name of an entry of `rules::upstreams`
  std::int64_t cost = 1;  ///< units each request spends in every limit
  failure_policy on_store_failure = failure_policy::fail_open;
  std::vector<limit> limits;
  /// `max_request_body`: largest request body in bytes (413 over it: from a declared
  /// Content-Length before any body byte is read, else as soon as a chunked body grows past
  /// it). `unlimited_size` = no limit. Default 16 MiB.
  std::uint64_t max_request_body = 16ull * 1024 * 1024;
  /// `max_response_body`: largest upstream response body relayed, in bytes (502 while no
  /// response byte was sent, else the client connection is closed). Default unlimited.
  std::uint64_t max_response_body = unlimited_size;
  /// `upgrade`: whether a request carrying `Upgrade` (WebSocket...) may be tunnelled to the
  /// upstream; false answers such a request 403.
  bool upgrade = true;
  /// `tunnel_idle_timeout`: an upgraded connection with no byte either way this long is closed.
  std::chrono::milliseconds tunnel_idle_timeout{300000};
  /// `cors:` this route's CORS policy (replacing the top-level one); null = the top-level
  /// `cors:`, if any.
  std::shared_ptr<const cors_policy> cors;
  int line = 0;
};

/// A file a rules file names, with where it is named: a problem with its content (an
/// expired certificate, a key that does not match) is reported at that line and field.
struct file_ref {
  std::string path;   ///< as used: a relative path is taken relative to the rules file
  std::string field;  ///< the dotted field path, e.g. `tls.certificates[0].cert`
  int line = 0;       ///< 1-based line of the field in the rules file
  bool operator==(const file_ref&) const = default;
};

/// An upstream (`upstreams.NAME.url`), an `http://host:port` or `https://host:port` origin.
struct upstream {
  std::string name;
  std::string url;   ///< as written
  std::string host;  ///< host name or address
  std::uint16_t port = 80;
  std::string base_path;  ///< path prefix of the url without trailing '/', often ""
  std::chrono::milliseconds connect_timeout{1000};
  /// Wait for the response head, and for each read of the response body (504 when the head
  /// is late; a stalled body closes the client connection).
  std::chrono::milliseconds timeout{30000};
  /// `https://`: connections are TLS (1.2 or 1.3), with SNI and the host name (or address)
  /// of the url checked against the certificate (RFC 6125, OpenSSL's X509_check_host).
  bool tls = false;
  /// `ca_file:` PEM file of the certificate authorities an https upstream's certificate must
  /// chain to; path "" = the system's store (Debian: /etc/ssl/certs).
  file_ref ca_file;
  /// `verify:` false accepts any certificate and name from an https upstream (a warning is
  /// logged when the rules are loaded). Default true.
  bool verify = true;
  /// `http2:` true forwards to this upstream over HTTP/2 (an http:// url: h2c with prior
  /// knowledge, RFC 9113 §3.3), e.g. a gRPC service; only HTTP/2 clients reach it. Default
  /// false (HTTP/1.1).
  bool http2 = false;
  /// `max_idle:` idle keep-alive connections to this upstream kept per worker (nginx's
  /// `keepalive N`, Envoy's max_connection_pool_per_host / idle limits); 0 keeps none. The
  /// oldest idle connection is closed first when more come back. Default 256.
  std::uint32_t max_idle = 256;
};

/// `tls.verify_client:` whether the listener asks clients for a certificate.
enum class client_verify {
  off,       ///< never asks
  optional,  ///< asks; a client may send none, one it sends must verify against client_ca
  require,   ///< a client without a certificate that verifies fails the handshake
};

/// One `tls.certificates` entry: a certificate chain (PEM, the leaf first, then its
/// intermediates) and its private key (PEM, possibly encrypted).
struct tls_certificate {
  file_ref cert;
  file_ref key;
  bool operator==(const tls_certificate&) const = default;
};

/// `tls:` TLS on the client listener (absent: plain TCP). Whether the listener is TLS at all
/// is read at start-up; the certificates, client_ca and verify_client are reloaded with the
/// rules file (new connections use them; open connections keep theirs).
struct listener_tls {
  bool enabled = false;  ///< a `tls:` section was given
  /// Served by SNI: the first whose certificate names the requested host (RFC 6125
  /// matching, wildcards included); the first entry for a client sending no SNI or a name
  /// no certificate has.
  std::vector<tls_certificate> certificates;
  file_ref client_ca;  ///< `client_ca:` PEM CAs client certificates must chain to; "" = none
  client_verify verify_client = client_verify::off;
  /// `key_passphrase_env:` the variable holding the passphrase of the encrypted keys ("" =
  /// none); `key_passphrase_file:` a file holding it (refused when group or others may read
  /// or write it). At most one of the two.
  std::string key_passphrase_env;
  int key_passphrase_env_line = 0;
  file_ref key_passphrase_file;
  int line = 0;  ///< of the `tls:` key
  bool operator==(const listener_tls&) const = default;
};

/// `client:` section: deadlines and caps for client connections, against slow and greedy
/// clients (slowloris, idle connection floods). Read at start-up. Each default and its nginx
/// and Envoy counterparts are in docs/operating.md (rules file reference, "client").
struct client_settings {
  /// `header_timeout:` the whole request head must arrive within this long of its first byte
  /// (of the accept, for a connection's first request). A partial head then gets
  /// `408 Request Timeout` (RFC 9110 §15.5.9) and the connection closes; a connection that
  /// sent nothing is closed without an answer.
  std::chrono::milliseconds header_timeout{10000};
  /// `keepalive_timeout:` a keep-alive connection waiting for its next request is closed
  /// after this long (without an answer: RFC 9112 §9.6 lets a server close an idle one).
  std::chrono::milliseconds keepalive_timeout{75000};
  /// `body_timeout:` the longest wait between two reads of a request body (`408` while no
  /// response byte was sent; the connection then closes).
  std::chrono::milliseconds body_timeout{30000};
  /// `body_min_rate:` a forwarded request body's minimum average rate in bytes per second
  /// (written `1KiB/s`; 0, the default, is none): the time spent waiting for its bytes may
  /// reach body_timeout + received / rate, then 408 as for body_timeout.
  std::uint64_t body_min_rate = 0;
  /// `send_timeout:` the longest wait for one write to the client to drain; then the
  /// connection closes.
  std::chrono::milliseconds send_timeout{30000};
  /// `max_connections:` open client connections per worker, 1 .. 1,000,000; a connection
  /// accepted over it is closed at once (reset). 0 (`auto`, the default): the process's file
  /// limit, less a reserve, shared by the workers with room for one upstream connection per
  /// client connection.
  std::uint64_t max_connections = 0;
  /// `max_headers:` header fields in a request head, 1 .. 10,000; over: 431 (RFC 6585 §5).
  std::uint32_t max_headers = 100;
  /// `max_header_size:` bytes of a whole request head (request line and every field),
  /// 1 KiB .. 1 MiB; over: 431 (RFC 6585 §5), or 414 when the request line alone is over
  /// `max_uri_length`.
  std::uint64_t max_header_size = 32 * 1024;
  /// `max_uri_length:` bytes of a request target, 1 .. 1 MiB; over: 414 (RFC 9110 §15.5.15).
  std::uint64_t max_uri_length = 8 * 1024;

  bool operator==(const client_settings&) const = default;
};

/// `store:` section.
struct store_settings {
  /// `type`: memory, redis (one address), redis-sentinel (the master found through Redis
  /// Sentinel, https://redis.io/docs/management/sentinel/) or redis-cluster (the counters
  /// sharded over a Redis Cluster's masters, https://redis.io/docs/reference/cluster-spec/).
  enum class kind { memory, redis, redis_sentinel, redis_cluster };
  enum kind type = kind::memory;
  /// Whether the counters live in Redis (type redis, redis-sentinel or redis-cluster).
  bool redis() const {
    return type == kind::redis || type == kind::redis_sentinel || type == kind::redis_cluster;
  }
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  /// A `host:port` of `sentinels:` (the host may be a name).
  struct address {
    std::string host;
    std::uint16_t port = 0;
    bool operator==(const address&) const = default;
  };
  std::vector<address> sentinels;  ///< `sentinels` (type redis-sentinel): at least one
  /// `nodes` (type redis-cluster): seed nodes, at least one; the slot map is asked of them.
  std::vector<address> nodes;
  std::string master_name;  ///< `master` (type redis-sentinel): the monitored name
  /// `sentinel_password_env`: name of the env variable holding the Sentinels' own password
  /// ("" = the Sentinels take no AUTH; the data nodes' password is `password_env`'s).
  std::string sentinel_password_env;
  /// `sentinel_password_file`: the file holding the Sentinels' own password, as
  /// `password_file` is read ("" = none; never with `sentinel_password_env`).
  std::string sentinel_password_file;
  /// The Sentinels' password read from `sentinel_password_file` ("" = none). A secret:
  /// never shown (/admin/config) or logged.
  std::string sentinel_password;
  /// `sentinel_timeout`: deadline of one Sentinel's answer (connect included).
  std::chrono::milliseconds sentinel_timeout{200};
  std::chrono::milliseconds timeout{5};  ///< deadline of one check
  std::string password_env;              ///< name of the env variable holding the password
  /// `password_file`: the file holding the password (relative paths from the rules file's
  /// directory), read with the rules file at start-up and on every reload: a regular file
  /// its owner alone may read (mode 0600 or 0400), one trailing newline dropped. "" = none;
  /// never with `password_env`.
  std::string password_file;
  /// The password read from `password_file` ("" = none). A secret: never shown
  /// (/admin/config) or logged.
  std::string password;
  /// `username`: the ACL user the data nodes are authenticated as (`AUTH <username>
  /// <password>`, Redis 6+ ACLs); "" = the default user (`AUTH <password>`).
  std::string username;
  /// `sentinel_username`: the ACL user of the Sentinels ("" = their default user).
  std::string sentinel_username;
  /// `store.tls:` how sluice speaks TLS to Redis (data nodes, Sentinels and cluster nodes
  /// alike), as managed services require. Read at start.
  struct tls_settings {
    bool enabled = false;  ///< a `tls:` section was given (and `enabled` is not false)
    /// `ca_file`: PEM certificates the server's chain is checked against (relative paths
    /// from the rules file's directory); "" = the system's trust store.
    std::string ca_file;
    /// `server_name`: the name sent as SNI and checked against the server's certificate;
    /// "" = the host being connected to (a Sentinel's or a cluster's answer included).
    std::string server_name;
    /// `verify`: check the chain and the name (default true); false only for a test bed.
    bool verify = true;
    std::string cert_file;  ///< `cert_file`: a client certificate (PEM), "" = none
    std::string key_file;   ///< `key_file`: its private key (PEM), with `cert_file`
    bool operator==(const tls_settings&) const = default;
  };
  tls_settings tls;
  double local_share = 1.0;  ///< `local` policy: share of each limit per instance
  /// `region_share`: the share of every limit this region's gateways enforce against this
  /// store (0 < share <= 1), unless a limit says its own (limit::region_share). 1 = all.
  double region_share = 1.0;
  /// `layout`: how buckets are kept in Redis. hash (default): as fields of `hash_groups`
  /// hashes per limit and identity namespace (~4x less memory per bucket); key: one key per
  /// bucket. Read at start (a reload does not move existing buckets).
  enum class layout_kind { hash, key };
  layout_kind layout = layout_kind::hash;
  std::uint32_t hash_groups = 65536;  ///< `hash_groups`: 1 .. 16,777,216
  /// `max_buckets` (type memory): bucket entries the memory store holds at most, 1 .. 2^40;
  /// at the bound expired buckets go first, then the ones nearest to full. Read at start.
  std::uint64_t max_buckets = 1'000'000;
  /// `over_limit_cache` (type redis): a worker answers a refusal itself while the store's
  /// refusal of that key and cost still stands (limiter::refusal_cache). A reload changes it.
  bool over_limit_cache = true;
  /// `max_batch` (Redis stores): checks a worker sends to one Redis node in one script call
  /// at most, 1 .. 1024. The checks that are ready in one turn of the worker's event loop go
  /// together; 1 sends each check as soon as it is made. Read at start.
  std::uint32_t max_batch = 64;
};

/// An IPv4 or IPv6 network in CIDR notation (`trusted_proxies` entries).
struct cidr {
  std::string text;  ///< as written
  bool v6 = false;
  std::array<unsigned char, 16> bytes{};  ///< network address (v4 in the first 4 bytes)
  int prefix = 0;                         ///< prefix length in bits
};

/// `identity.directory:` a store-backed plan directory: a Redis hash of API key → plan name,
/// read with HGET on each worker's own store connection, behind a per-worker cache.
struct directory_settings {
  bool enabled = false;                           ///< a `directory:` section was given
  std::string hash = "sluice:api_keys";           ///< the Redis hash holding key → plan
  std::chrono::milliseconds cache_ttl{60000};     ///< how long a found plan is reused
  std::chrono::milliseconds negative_ttl{10000};  ///< how long "no such key" is reused
  std::size_t cache_size = 100000;                ///< entries per worker (LRU beyond it)
};

class api_key_file;  // sluice/config/key_file.hpp

/// `identity:` section.
struct identity_settings {
  std::string api_key_header = "X-API-Key";  ///< "" = not taken from a header
  std::string api_key_query;                 ///< query parameter name; "" = none
  std::string user_header;                   ///< "" = none
  std::vector<cidr> trusted_proxies;
  unknown_key_policy unknown_key = unknown_key_policy::anonymous;
  /// Buckets keyed by client address use its network of this many bits: an IPv6 host
  /// cannot rotate through its /64 to get fresh buckets (`ipv6_prefix:`, 1..128).
  int ipv6_prefix = 64;
  int ipv4_prefix = 32;  ///< `ipv4_prefix:`, 1..32 (24 = per /24 range)
  /// `forwarded:` the header believed from `trusted_proxies` for the client address.
  forwarded_header forwarded = forwarded_header::x_forwarded_for;
  directory_settings directory;  ///< store-backed plan directory
};

/// Which rate-limit header sets to send (`headers:`).
struct header_sets {
  bool x_ratelimit = true;
  bool ietf = true;
};

/// `admin:` written as a mapping: the bearer token the admin listener asks for. With a token,
/// every admin path but `/healthz` and `/readyz` (and `/metrics` when `metrics_open`) needs
/// `Authorization: Bearer <token>`. Read on every load, so a reload rotates it.
struct admin_guard {
  /// The token (from `token_env` or `token_file`); "" = no token asked for. A secret: never
  /// shown (/admin/config) or logged.
  std::string token;
  std::string token_env;      ///< `token_env`: the environment variable it was read from
  std::string token_file;     ///< `token_file`: the file it was read from (owner-only, as
                              ///< `store.password_file`)
  bool metrics_open = false;  ///< `metrics_open`: `GET /metrics` without the token
};

/// One node of a `rate_limit_service` domain's descriptor tree (modelled on
/// envoyproxy/ratelimit's): a request's descriptor entry matches it when the keys are equal
/// and, if `value` is given, the values too (an exact value is preferred over any value).
struct rls_descriptor {
  std::string key;
  std::string value;                ///< "" with any_value: every value of `key`
  bool any_value = true;            ///< no `value:` was written
  std::vector<std::string> limits;  ///< `limit:`/`limits:` names in rate_limit_service.limits
  std::vector<rls_descriptor> descriptors;  ///< nested nodes (the next entry of a descriptor)
  int line = 0;
};

/// One `rate_limit_service.domains` entry.
struct rls_domain {
  std::string domain;
  std::vector<rls_descriptor> descriptors;
  int line = 0;
};

/// `rate_limit_service:` sluice as Envoy's rate limit service (gRPC
/// `envoy.service.ratelimit.v3.RateLimitService`, src/rls/). Read at start-up for its
/// listener; its limits and domains are reloaded with the rules file.
struct rate_limit_service_settings {
  bool enabled = false;  ///< a `rate_limit_service:` section was given
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;
  /// `on_store_failure:` fail_open (every descriptor OK, counted) or fail_closed (the call
  /// fails with UNAVAILABLE); `local` is not offered here.
  failure_policy on_store_failure = failure_policy::fail_open;
  /// `limits:` the limits the descriptor leaves name, as a route's limits are written.
  std::vector<limit> limits;
  std::vector<rls_domain> domains;
  /// The limit of `name`, or nullptr.
  const limit* find_limit(std::string_view name) const {
    for (const auto& l : limits)
      if (l.name == name) return &l;
    return nullptr;
  }
};

/// A whole rules file.
struct rules {
  std::string source;  ///< file name it was loaded from (diagnostics)
  std::string listen_host = "0.0.0.0";
  std::uint16_t listen_port = 8080;
  std::string admin_host;  ///< "" = no admin listener
  std::uint16_t admin_port = 0;
  admin_guard admin;     ///< `admin: {listen, token_env | token_file, metrics_open}`
  unsigned workers = 0;  ///< 0 = one per core
  store_settings store;
  header_sets headers;
  /// `retry_after_jitter:` up to this much random delay is added to Retry-After (never
  /// subtracted, so it stays honest); 0 = none.
  std::chrono::milliseconds retry_after_jitter{0};
  /// `drain_timeout:` on SIGTERM/SIGINT, requests in flight (and tunnels) get this long to
  /// finish before the process exits. Read at start-up.
  std::chrono::milliseconds drain_timeout{30000};
  /// `access_log: {path: FILE | "-", format: plain | json}`: one line per request (path ""
  /// = none, the default; "-" = stdout). Read at start-up only.
  std::string access_log_path;
  bool access_log_json = false;
  /// `status: {top: N, window: DURATION}`: the status page's and `GET /admin/top`'s table of
  /// the most limited callers: N rows by default (1..100, default 10) counted over the last
  /// `window` (whole minutes, 1m..60m, default 10m). Read at start-up only.
  std::size_t status_top = 10;
  std::size_t status_window_minutes = 10;
  /// `status: {graph: DURATION, graph_step: DURATION}`: the status page's per-route rate
  /// graphs cover the last `graph` (whole minutes, 1m..60m, default 10m) in points one
  /// `graph_step` apart (1s..60s, default 10s; at most 720 points). Read at start-up only.
  std::size_t status_graph_minutes = 10;
  std::chrono::milliseconds status_graph_step{10000};
  /// `tls:` TLS termination on the client listener (`enabled` false: plain TCP).
  listener_tls tls;
  /// `http2:` HTTP/2 from clients on the listener (nginx's `http2 on;`): with `tls:`, ALPN
  /// offers `h2` before `http/1.1`; without, a connection opening with the HTTP/2 preface is
  /// h2c with prior knowledge. HTTP/1.1 is served alongside either way. Read at start-up.
  bool http2 = false;
  /// `client:` deadlines and caps of client connections. The older top-level
  /// `client_timeout:` sets each of its four timeouts that `client:` does not set.
  client_settings client;
  /// `shadow_header:` when set, a forwarded request that a shadow limit would have refused
  /// carries this field, listing those limits' names (comma-separated, declaration order);
  /// "" = not marked. The client never sees it.
  std::string shadow_header;
  /// `decision_time_header:` when set, every forwarded request of a limited route carries this
  /// field with the store time its check was decided at (ms since the Unix epoch): what the
  /// accuracy harness (bench/accuracy.sh) measures limits against. "" = not sent.
  std::string decision_time_header;
  std::map<std::string, upstream> upstreams;
  identity_settings identity;
  std::map<std::string, plan> plans;
  /// key → plan name. An open-addressing table (Boost's unordered_flat_map), looked up by a
  /// view: every request with a key reads it, and with many keys a node-based map costs a
  /// cache miss per hop (bucket, node) where this one costs one probe group.
  boost::unordered_flat_map<std::string, std::string, string_hash, std::equal_to<>> api_keys;
  /// `api_keys_file:` keys → plans from a separate, separately reloaded file; null = none.
  /// Consulted after `api_keys`. Shared (not copied) by snapshots loaded from one file.
  std::shared_ptr<api_key_file> api_keys_file;
  std::vector<route> routes;
  /// `cors:` the CORS policy of every route without its own; null = no CORS handling.
  std::shared_ptr<const cors_policy> cors;
  /// `rate_limit_service:` the Envoy rate limit service (disabled by default).
  rate_limit_service_settings rate_limit_service;
};

}  // namespace sluice::config
