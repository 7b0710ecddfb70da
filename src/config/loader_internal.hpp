// SPDX-License-Identifier: Apache-2.0
#pragma once
// The rules loader's internals, shared by its files (src/config/): the node readers
// (readers.cpp), the limit lists (limits.cpp), one file per section of the rules file
// (sections/*.cpp), the cross-checks (cross_checks.cpp) and the top-level walk that calls
// them in file order (loader.cpp). A field is added in its section's file; the reader it
// needs is in readers.cpp.

#include "sluice/config/loader.hpp"

#include "config/file.hpp"
#include "config/text.hpp"
#include "sluice/config/algorithm_kind.hpp"
#include "sluice/config/duration_text.hpp"
#include "sluice/config/key_file.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::config::detail {

inline constexpr std::string_view two_53 = "2^53 = 9007199254740992";
inline constexpr std::chrono::milliseconds max_period{std::chrono::hours{24 * 365}};
/// Largest count of a sliding_log limit: the log holds one stamp (~10 bytes) per unit and the
/// script reads it whole on each check.
inline constexpr std::int64_t max_log_units = 100'000;
/// Deepest nesting of a `rate_limit_service` descriptor tree (entries per descriptor).
inline constexpr int rls_max_depth = 8;

std::string join(const std::string& path, std::string_view key);

std::string at(const std::string& path, std::size_t i);

/// 1-based line of `n`, or `fallback` when yaml-cpp has no position for it.
int line_of(const YAML::Node& n, int fallback);

std::string describe(const YAML::Node& n);

std::string list_of(const std::vector<std::string>& names);

bool valid_limit_name(std::string_view s);

/// The most slots a concurrency limit may hold (`max_in_flight`): a check reads a key's
/// slots whole (O(max_in_flight)).
inline constexpr std::int64_t max_in_flight_bound = 10'000;

bool same_params(const limit_params& a, const limit_params& b);

/// A whole number written in digits in [min, max]; otherwise nullopt and the diagnostic's
/// message in `message` (`max == max_exact_integer` explains the 2^53 bound). Shared by every
/// integer field and by the command line's `--workers`.
std::optional<std::int64_t> check_integer(std::string_view text, std::string_view field,
                                          std::int64_t min, std::int64_t max, std::string& message);

/// `host:port` as `listen:` and `admin:` (`listening`: an IP literal host, port 0 allowed) or
/// `store.address` (a host name too, port 1..65535) take it; otherwise nullopt and the
/// diagnostic's message in `message`. Shared with the command line's `--listen` and `--admin`.
std::optional<text::address> check_address(std::string_view s, bool listening,
                                           std::string& message);

/// One `key: value` of a mapping, with the lines diagnostics point at.
struct entry {
  std::string key;
  int key_line = 0;
  YAML::Node value;
  int line = 0;  ///< of the value (of the key when the value is empty)
};

struct map_view {
  std::vector<entry> entries;  ///< first occurrence of each key, in file order
  /// key -> index in entries (a linear search made a mapping of n keys cost n^2 / 2 string
  /// compares: 10,000 inline api_keys took about 1.5 G instructions to load).
  std::unordered_map<std::string, std::size_t> index;
  const entry* find(std::string_view key) const {
    auto it = index.find(std::string(key));
    return it == index.end() ? nullptr : &entries[it->second];
  }
  void add(entry e) {
    index.emplace(e.key, entries.size());
    entries.push_back(std::move(e));
  }
};

/// Rate and burst of a limit (or of one plan override) and where they were written.
struct param_src {
  limit_params value;
  std::string rate_text;  ///< as written (or inherited), for messages
  std::string rate_path;
  int rate_line = 0;
  std::string burst_path;  ///< the burst field, or the limit/override when burst is defaulted
  int burst_line = 0;
  bool usable = false;  ///< rate and burst parsed (the count may be 0, reported already)
};

struct limit_src {
  limit value;
  std::string path;
  std::string name_path;
  int name_line = 0;
  bool usable = true;      ///< parsed well enough for the cross-checks
  bool duplicate = false;  ///< repeated in its own list (reported once, not compared again)
  std::optional<param_src> defaults;
  std::vector<std::pair<std::string, param_src>> overrides;
  struct plan_ref {
    std::string plan, path;
    int line;
  };
  std::vector<plan_ref> plan_refs;
  std::string shards_path, lease_path;  ///< for cost messages ("" when not written)
  int shards_line = 0, lease_line = 0;
};

struct route_src {
  route value;
  std::string path;
  std::string name_path;
  int name_line = 0;
  bool cost_ok = true;
  std::string upstream_path;
  int upstream_line = 0;
  std::vector<limit_src> limits;
};

struct plan_src {
  std::string name;
  std::string path;
  std::vector<limit_src> limits;
};

class loader {
 public:
  explicit loader(std::string file) : file_(std::move(file)) {}

  load_result run(const YAML::Node& root);

  void error(int line, std::string path, std::string message) {
    diags_.push_back({file_, line, std::move(path), std::move(message)});
  }

  load_result fail() {
    std::stable_sort(diags_.begin(), diags_.end(),
                     [](const diagnostic& a, const diagnostic& b) { return a.line < b.line; });
    return {nullptr, std::move(diags_)};
  }

 private:
  // --- node shapes (readers.cpp) ----------------------------------------------------

  /// The entries of mapping `n`; reports duplicate keys and, when `allowed` is given, keys
  /// outside it (with a "did you mean"). nullopt when `n` is not a mapping.
  ///
  /// `empty_ok`: an empty value (`plans:` with every entry commented out) is an empty mapping.
  /// `secret_keys`: the keys are credentials (`api_keys`): a diagnostic names the mapping and
  /// the line, never the key.
  std::optional<map_view> mapping(const YAML::Node& n, const std::string& path, int line,
                                  const std::vector<std::string>* allowed, bool empty_ok = false,
                                  bool secret_keys = false);

  std::optional<map_view> fields(const YAML::Node& n, const std::string& path, int line,
                                 const std::vector<std::string>& allowed, bool empty_ok = false);

  /// True when `n` is a list to walk. `empty_ok`: an empty value is an empty list (false, no
  /// diagnostic).
  bool sequence(const YAML::Node& n, const std::string& path, int line, bool empty_ok = false);

  // --- scalars (readers.cpp) --------------------------------------------------------

  std::optional<std::string> string(const YAML::Node& n, const std::string& path, int line);

  /// `true` or `false` (YAML 1.2 core schema booleans only: not yes/no/on/off).
  std::optional<bool> boolean(const entry& e, const std::string& path);

  std::optional<std::string> non_empty(const entry& e, const std::string& path);

  /// A whole number in [min, max] (check_integer()).
  std::optional<std::int64_t> integer(const entry& e, const std::string& path,
                                      std::string_view field, std::int64_t min, std::int64_t max);

  /// A byte size (text::parse_size): a whole number with an optional unit, or `unlimited`.
  std::optional<std::uint64_t> size(const entry& e, const std::string& path);

  /// A duration of at least 1 ms and at most `max`.
  std::optional<std::chrono::milliseconds> duration(const entry& e, const std::string& path,
                                                    std::string_view field,
                                                    std::chrono::milliseconds max);

  /// A share in (0, 1], written as a plain number (`local_share`, `region_share`).
  std::optional<double> share(const entry& e, const std::string& path, std::string_view field);

  /// One of `table`'s names; `what` names the kind of value in the message.
  template <class E>
  std::optional<E> choice(const YAML::Node& n, const std::string& path, int line,
                          std::string_view what,
                          std::initializer_list<std::pair<const char*, E>> table) {
    auto s = string(n, path, line);
    if (!s) return std::nullopt;
    std::vector<std::string> names;
    for (const auto& [name, value] : table) {
      if (*s == name) return value;
      names.emplace_back(name);
    }
    if (auto sug = text::suggest(*s, names))
      error(line, path,
            "unknown " + std::string(what) + " '" + *s + "'; did you mean '" + *sug + "'?");
    else
      error(line, path,
            "unknown " + std::string(what) + " '" + *s + "'; expected one of " + list_of(names));
    return std::nullopt;
  }

  std::optional<text::address> address(const entry& e, const std::string& path, bool allow_zero);

  std::optional<std::string> header_name(const entry& e, const std::string& path);

  /// The name of an environment variable (`[A-Za-z_][A-Za-z0-9_]*`), or nullopt (reported).
  std::optional<std::string> env_name(const entry& e, const std::string& path);

  /// A file name (a non-empty string), relative to the rules file's directory unless it is
  /// absolute, with the field and line that named it; nullopt (reported) otherwise. The file
  /// is not read here.
  std::optional<file_ref> file_path(const entry& e, const std::string& path);

  /// A rate; a count of 0 is reported here and still returned so that the cost checks run.
  std::optional<rate> rate_value(const entry& e, const std::string& path, std::string& text_out);

  /// A calendar quota's rate (algorithm calendar): `N/day`, `N/week` or `N/month`, nullopt
  /// (reported) for anything else; its period is the unit's longest (1, 7 or 31 days).
  std::optional<rate> calendar_rate_value(const entry& e, const std::string& path,
                                          std::string& text_out);

  /// `utc_offset: "+HH:MM"` in minutes east of UTC, -14:00 .. +14:00.
  std::optional<std::int32_t> utc_offset(const entry& e, const std::string& path);

  /// `warn_at:` a share of the Limit in basis points, 1 .. 9999: `80%` (at most two decimals)
  /// or a plain fraction `0.8` (at most four).
  std::optional<std::int32_t> warn_at(const entry& e, const std::string& path);

  // --- limits (limits.cpp), shared by plans and routes -----------------------------

  /// The token bucket counts in units of 1/(period_ms / gcd(count, period_ms)) token so that a
  /// refill of `count` tokens per `period` ms is an integer number of units per ms; its
  /// capacity burst × units_per_token must stay an exact double (TTL overflow, part C).
  void check_capacity(const param_src& p, algorithm algo);

  /// Burst of a limit or override. Defaults to the count of its own rate.
  param_src params(const entry* rate_e, const entry* burst_e, const param_src* inherit,
                   const std::string& path, int line, algorithm algo);

  std::optional<limit_src> parse_limit(const YAML::Node& n, const std::string& path, int line);

  std::vector<limit_src> parse_limits(const entry& e, const std::string& path);

  /// A static cost above a bucket's capacity would be refused forever with a Retry-After that
  /// lies (DESIGN.md, "Semantics"; a cost above the burst): it is a config error. `where` names the
  /// route for plan limits, whose paths do not.
  void check_cost(const limit_src& l, std::int64_t cost, const std::string& where);

  /// `lease`, `lease_time`, `shards` and `region_share` of limit `l` (fields `m`), checked
  /// against its key, algorithm and every bucket it makes (limits.cpp).
  void parse_hot_key_fields(const map_view& m, limit_src& l);
  /// `block:` of a limit (after its mode, lease and shards are known).
  void parse_block(const entry& e, limit_src& l);
  /// `charge:` of a limit (charge.cpp; after its mode, algorithm, lease and shards are known).
  void parse_charge(const entry& e, limit_src& l);
  /// The fields of an `algorithm: concurrency` limit: max_in_flight (required, 1 ..
  /// max_in_flight_bound), slot_ttl (1s .. 1h, default 30s); rate, burst and plans refused.
  void parse_concurrency(const map_view& m, limit_src& l);

  /// The first field in which two definitions of one limit name differ, if any.
  static std::optional<std::string> difference(const limit& a, const limit& b);

  // --- sections/headers.cpp --------------------------------------------------------

  void parse_headers(const entry& e, rules& r);

  /// A header field the gateway sets on forwarded requests (`shadow_header`,
  /// `decision_time_header`): an HTTP token that is not one the proxy frames, routes or
  /// identifies by, nor a rate-limit field of its own.
  std::optional<std::string> gateway_header(const entry& e, const std::string& path);

  // --- sections/admin.cpp ----------------------------------------------------------

  /// `admin:` the admin listener: `host:port`, or `{listen: host:port, token_env: NAME |
  /// token_file: FILE, metrics_open: BOOL}`. The token is read here (the variable from the
  /// environment, the file as `store.password_file`); unset, empty or exposed is an error.
  void parse_admin(const entry& e, rules& r);

  // --- sections/client.cpp ---------------------------------------------------------

  /// `client:` deadlines and caps of client connections. `legacy` is the top-level
  /// `client_timeout:` (when given): the value of each timeout this section leaves out.
  void parse_client(const entry* e, std::optional<std::chrono::milliseconds> legacy, rules& r);

  // --- sections/access_log.cpp -----------------------------------------------------

  /// `access_log:` its path (a file, or `-` for stdout) and format (plain or json).
  void parse_access_log(const entry& e, rules& r);

  // --- sections/status.cpp ---------------------------------------------------------

  /// `status:` the most-limited-callers table: `top` (rows, 1..100) and `window` (whole
  /// minutes, 1m..60m).
  void parse_status(const entry& e, rules& r);

  // --- sections/tls.cpp ------------------------------------------------------------

  /// `tls:` TLS on the client listener: the certificates (files read later, by
  /// http::build_tls), client verification and the key passphrase's source.
  void parse_tls(const entry& e, rules& r);

  // --- sections/store.cpp ----------------------------------------------------------

  void parse_store(const entry& e, rules& r);

  /// `store.nodes` (type redis-cluster only, which needs a non-empty list of `host:port`
  /// seeds) and `address` (not with redis-cluster: the nodes come from the cluster).
  void parse_cluster_fields(const entry& e, const map_view& m, rules& r);

  /// `store.sentinels`, `master`, `sentinel_password_env`, `sentinel_timeout` (type
  /// redis-sentinel only, which needs the first two) and `address` (not with redis-sentinel).
  void parse_sentinel_fields(const entry& e, const map_view& m, rules& r);
  /// `store.tls`: the CA file, server name, verification and client certificate.
  void parse_store_tls(const entry& e, rules& r);

  /// `store.password_file` / `sentinel_password_file`: reads the secret (file::read_private,
  /// one trailing newline dropped) into `password_out` and the path it was read from into
  /// `file_out`; reports a missing, unreadable, group- or world-accessible, empty or
  /// multi-line file, naming the file (never the password).
  /// `noun` names the secret in messages ("password", "token").
  void password_file(const entry& e, const std::string& path, std::string& file_out,
                     std::string& password_out, std::string_view noun = "password");

  // --- sections/upstreams.cpp ------------------------------------------------------

  void parse_upstreams(const entry& e, rules& r);

  // --- sections/identity.cpp and sections/directory.cpp ----------------------------

  void parse_identity(const entry& e, rules& r);

  /// `identity.directory:` a Redis hash of key → plan behind a per-worker cache.
  void parse_directory(const entry& e, rules& r);

  // --- sections/cors.cpp -----------------------------------------------------------

  /// One `cors.origins` entry; reports (and returns nullopt for) a pattern that can never
  /// equal an origin a browser sends (Fetch standard §3.2.5, "serialization of an origin":
  /// lower case, no path, no default port).
  std::optional<origin_pattern> origin(const std::string& s, const std::string& path, int line);

  /// A list of tokens (methods, header names) or `*` at `path`; nullopt after an error.
  /// `upper`: upper-case each item (methods, as routes do).
  std::optional<std::vector<std::string>> token_list(const entry& e, const std::string& path,
                                                     bool upper, const char* what);

  /// A `cors:` block at `path` (top level or a route's).
  std::shared_ptr<const cors_policy> parse_cors(const entry& e, const std::string& path);

  // --- sections/plans.cpp ----------------------------------------------------------

  void parse_plans(const entry& e);

  void parse_api_keys(const entry& e);

  // --- sections/routes.cpp ---------------------------------------------------------

  void parse_routes(const entry& e);

  /// An exact path or glob pattern: starts with '/', no whitespace, control bytes, '?' or
  /// '#', and already canonical (a route written `/a//b` could never match, since requests
  /// are matched in canonical form).
  bool match_path(const std::string& s, const std::string& path, int line, std::string_view field);

  /// `*` and `**` only as whole segments; at most one `**`.
  bool glob_ok(const std::string& s, const std::string& path, int line);

  /// A host name or address to match the request's Host against, lower-cased; no port.
  std::optional<std::string> host_name(const std::string& s, const std::string& path, int line);

  // --- sections/rate_limit_service.cpp ---------------------------------------------

  /// `rate_limit_service:` its listener, failure policy, limits and domain trees; the names
  /// the leaves give are checked against the limits in cross_check().
  void parse_rate_limit_service(const entry& e, rules& r);

  /// A list of descriptor nodes at `path`, `depth` levels deep (at most rls_max_depth).
  std::vector<rls_descriptor> parse_rls_descriptors(const entry& e, const std::string& path,
                                                    int depth);

  // --- cross_checks.cpp ------------------------------------------------------------

  void cross_check(const rules& r);

  struct api_key_src {
    std::string key, plan, path;
    int line;
  };

  std::string file_;
  std::vector<diagnostic> diags_;
  std::vector<plan_src> plans_;
  std::vector<route_src> routes_;
  std::vector<api_key_src> api_keys_;
  std::vector<limit_src> rls_limits_;
  struct rls_ref {
    std::string limit, path;
    int line;
  };
  std::vector<rls_ref> rls_refs_;  ///< every limit name a descriptor leaf gives
  int directory_line_ = 0;
  /// `store.region_share` (parsed before any limit): a limit's region_share by default.
  double region_share_ = 1.0;
};

/// On redis-cluster: marks the enforced limits a request can carry with another enforced one
/// (limit::split_on_cluster).
void mark_split_limits(rules& r);

}  // namespace sluice::config::detail
