// Loading a rules file: yaml-cpp builds the node tree, then one pass turns it into the rules
// model while collecting every diagnostic (DESIGN.md, "The rules file").
//
// Why a hand-written schema walk rather than YAML::convert<>: the operator needs every mistake
// at once, each with a line and a dotted path, and yaml-cpp's conversions throw at the first
// one without a path. Why the cross-checks run after the walk: a route may name an upstream or
// a plan declared further down, and a limit name may be reused anywhere in the file.
//
// Numbers end up in Lua scripts whose numbers are doubles (STYLE.md: integers cross that
// boundary), so every count, burst and cost is checked against 2^53 here, once, and the data
// path never has to interpret a zero, a negative or an inexact value (cases c05, c06).

#include "sluice/config/loader.hpp"

#include <boost/asio/ip/address.hpp>

#include "config/file.hpp"
#include "config/text.hpp"
#include "sluice/config/key_file.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <utility>

namespace sluice::config {

std::string diagnostic::to_string() const {
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line);
  out += ": ";
  if (!path.empty()) out += path + ": ";
  out += message;
  return out;
}

namespace {

constexpr std::string_view two_53 = "2^53 = 9007199254740992";
constexpr std::chrono::milliseconds max_period{std::chrono::hours{24 * 365}};
/// Largest count of a sliding_log limit: the log holds one stamp (~10 bytes) per unit and the
/// script reads it whole on each check.
constexpr std::int64_t max_log_units = 100'000;

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string at(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

/// 1-based line of `n`, or `fallback` when yaml-cpp has no position for it.
int line_of(const YAML::Node& n, int fallback) {
  const YAML::Mark m = n.Mark();
  return m.is_null() ? fallback : m.line + 1;
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "'" + n.Scalar() + "'";
    default:
      return "nothing";
  }
}

std::string list_of(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string format_ms(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms % 86'400'000 == 0) return std::to_string(ms / 86'400'000) + "d";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

bool valid_limit_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

bool is_window(algorithm a) {
  return a == algorithm::fixed_window || a == algorithm::sliding_window ||
         a == algorithm::sliding_log;
}

const char* algorithm_name(algorithm a) {
  switch (a) {
    case algorithm::token_bucket:
      return "token_bucket";
    case algorithm::fixed_window:
      return "fixed_window";
    case algorithm::sliding_window:
      return "sliding_window";
    case algorithm::sliding_log:
      return "sliding_log";
    case algorithm::gcra:
      return "gcra";
  }
  return "?";
}

bool same_params(const limit_params& a, const limit_params& b) {
  return a.rate.count == b.rate.count && a.rate.period == b.rate.period && a.burst == b.burst;
}

/// A whole number written in digits in [min, max]; otherwise nullopt and the diagnostic's
/// message in `message` (`max == max_exact_integer` explains the 2^53 bound). Shared by every
/// integer field and by the command line's `--workers`.
std::optional<std::int64_t> check_integer(std::string_view text, std::string_view field,
                                          std::int64_t min, std::int64_t max,
                                          std::string& message) {
  const std::string s(text);
  const auto r = text::parse_int(s);
  const std::string f(field);
  if (r.error == text::int_error::too_large ||
      (r.error == text::int_error::none && r.value > max)) {
    if (max == max_exact_integer)
      message = f + " " + s + " is above " + std::string(two_53) +
                ", the largest integer the store arithmetic represents exactly";
    else
      message = f + " must be at most " + std::to_string(max) + ", got " + s;
    return std::nullopt;
  }
  if (r.error == text::int_error::not_a_number) {
    // Integers are written in digits everywhere in the file (rate counts too): `1e3` or
    // `2.0` is refused as a spelling, not as a value.
    switch (text::classify_number(s)) {
      case text::notation::whole:
        message = "expected an integer written in digits, got " + s;
        break;
      case text::notation::fractional:
        message = f + " must be a whole number, got " + s;
        break;
      case text::notation::not_a_number:
        message = "expected an integer, got '" + s + "'";
        break;
    }
    return std::nullopt;
  }
  if (r.value < min) {
    if (min == 0)
      message = f + " must not be negative, got " + s;
    else
      message = f + " must be at least " + std::to_string(min) + ", got " + s;
    return std::nullopt;
  }
  return r.value;
}

/// `host:port` as `listen:` and `admin:` (`listening`: an IP literal host, port 0 allowed) or
/// `store.address` (a host name too, port 1..65535) take it; otherwise nullopt and the
/// diagnostic's message in `message`. Shared with the command line's `--listen` and `--admin`.
std::optional<text::address> check_address(std::string_view s, bool listening,
                                           std::string& message) {
  std::string why;
  auto a = text::parse_address(s, listening, why);
  // The IPv6 example is quoted: unquoted, YAML reads `[::1]:8080` as a list.
  if (!a) {
    message = "invalid address '" + std::string(s) + "': " + why +
              " (expected host:port, such as 0.0.0.0:8080 or \"[::1]:8080\")";
    return a;
  }
  boost::system::error_code ec;
  if (listening && (boost::asio::ip::make_address(a->host, ec), ec)) {
    // A listening address is bound as written: a host name would fail only at start-up.
    message = "invalid address '" + std::string(s) +
              "': a listening address must be an IP address, such as 127.0.0.1:8080 or "
              "\"[::1]:8080\" (host names are not resolved)";
    return std::nullopt;
  }
  return a;
}

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
  // --- node shapes -----------------------------------------------------------------------

  /// The entries of mapping `n`; reports duplicate keys and, when `allowed` is given, keys
  /// outside it (with a "did you mean"). nullopt when `n` is not a mapping.
  ///
  /// `empty_ok`: an empty value (`plans:` with every entry commented out) is an empty mapping.
  std::optional<map_view> mapping(const YAML::Node& n, const std::string& path, int line,
                                  const std::vector<std::string>* allowed, bool empty_ok = false) {
    if (empty_ok && n.IsNull()) return map_view{};
    if (!n.IsMap()) {
      error(line, path, "expected a mapping, got " + describe(n));
      return std::nullopt;
    }
    map_view out;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node key = it->first;
      const int key_line = line_of(key, line);
      if (!key.IsScalar()) {
        error(key_line, path, "expected a string key, got " + describe(key));
        continue;
      }
      entry e{key.Scalar(), key_line, it->second, 0};
      e.line = e.value.IsNull() ? key_line : line_of(e.value, key_line);
      const std::string key_path = join(path, e.key);
      // yaml-cpp keeps both pairs of a repeated key and `node[key]` returns the first:
      // a silent override that an operator would never notice, so it is an error.
      if (const entry* first = out.find(e.key)) {
        error(key_line, key_path,
              "duplicate key '" + e.key + "' (first at line " + std::to_string(first->key_line) +
                  ")");
        continue;
      }
      if (allowed && std::find(allowed->begin(), allowed->end(), e.key) == allowed->end()) {
        if (auto s = text::suggest(e.key, *allowed))
          error(key_line, key_path, "unknown key '" + e.key + "'; did you mean '" + *s + "'?");
        else
          error(key_line, key_path,
                "unknown key '" + e.key + "'; expected one of " + list_of(*allowed));
        continue;
      }
      out.add(std::move(e));
    }
    return out;
  }

  std::optional<map_view> fields(const YAML::Node& n, const std::string& path, int line,
                                 const std::vector<std::string>& allowed, bool empty_ok = false) {
    return mapping(n, path, line, &allowed, empty_ok);
  }

  /// True when `n` is a list to walk. `empty_ok`: an empty value is an empty list (false, no
  /// diagnostic).
  bool sequence(const YAML::Node& n, const std::string& path, int line, bool empty_ok = false) {
    if (n.IsSequence()) return true;
    if (empty_ok && n.IsNull()) return false;
    error(line, path, "expected a list, got " + describe(n));
    return false;
  }

  // --- scalars ---------------------------------------------------------------------------

  std::optional<std::string> string(const YAML::Node& n, const std::string& path, int line) {
    if (n.IsScalar()) return n.Scalar();
    error(line, path, "expected a string, got " + describe(n));
    return std::nullopt;
  }

  /// `true` or `false` (YAML 1.2 core schema booleans only: not yes/no/on/off).
  std::optional<bool> boolean(const entry& e, const std::string& path) {
    auto s = string(e.value, path, e.line);
    if (!s) return std::nullopt;
    if (*s == "true") return true;
    if (*s == "false") return false;
    error(e.line, path, "expected true or false, got '" + *s + "'");
    return std::nullopt;
  }

  std::optional<std::string> non_empty(const entry& e, const std::string& path) {
    auto s = string(e.value, path, e.line);
    if (s && s->empty()) {
      error(e.line, path, "must not be empty");
      return std::nullopt;
    }
    return s;
  }

  /// A whole number in [min, max] (check_integer()).
  std::optional<std::int64_t> integer(const entry& e, const std::string& path,
                                      std::string_view field, std::int64_t min, std::int64_t max) {
    if (!e.value.IsScalar()) {
      error(e.line, path, "expected an integer, got " + describe(e.value));
      return std::nullopt;
    }
    std::string message;
    auto v = check_integer(e.value.Scalar(), field, min, max, message);
    if (!v) error(e.line, path, std::move(message));
    return v;
  }

  /// A byte size (text::parse_size): a whole number with an optional unit, or `unlimited`.
  std::optional<std::uint64_t> size(const entry& e, const std::string& path) {
    auto s = string(e.value, path, e.line);
    if (!s) return std::nullopt;
    const auto r = text::parse_size(*s);
    switch (r.error) {
      case text::size_error::none:
        return r.value;
      case text::size_error::malformed:
        error(e.line, path,
              "invalid size '" + *s +
                  "': expected a whole number of bytes with an optional unit (B, KB, MB, GB, "
                  "KiB, MiB, GiB), such as 16MiB, or unlimited");
        return std::nullopt;
      case text::size_error::too_large:
        error(e.line, path, "size '" + *s + "' is larger than 2^53 bytes (use unlimited)");
        return std::nullopt;
    }
    return std::nullopt;
  }

  /// A duration of at least 1 ms and at most `max`.
  std::optional<std::chrono::milliseconds> duration(const entry& e, const std::string& path,
                                                    std::string_view field,
                                                    std::chrono::milliseconds max) {
    auto s = string(e.value, path, e.line);
    if (!s) return std::nullopt;
    const auto r = text::parse_duration(*s);
    switch (r.error) {
      case text::duration_error::malformed:
        error(e.line, path,
              "invalid duration '" + *s +
                  "': expected a whole number and a unit (ms, s, m, h, d), such as 250ms or 5s");
        return std::nullopt;
      case text::duration_error::zero:
        error(e.line, path, std::string(field) + " " + *s + " is shorter than 1ms");
        return std::nullopt;
      case text::duration_error::too_large:
        break;
      case text::duration_error::none:
        if (r.value <= max) return r.value;
        break;
    }
    error(e.line, path,
          std::string(field) + " " + *s + " is longer than the maximum of " + format_ms(max));
    return std::nullopt;
  }

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

  std::optional<text::address> address(const entry& e, const std::string& path, bool allow_zero) {
    if (e.value.IsSequence()) {
      error(e.line, path, "expected host:port, got a list (quote an IPv6 address: \"[::1]:8080\")");
      return std::nullopt;
    }
    auto s = string(e.value, path, e.line);
    if (!s) return std::nullopt;
    std::string message;
    auto a = check_address(*s, allow_zero, message);
    if (!a) error(e.line, path, std::move(message));
    return a;
  }

  std::optional<std::string> header_name(const entry& e, const std::string& path) {
    auto s = string(e.value, path, e.line);
    if (!s) return std::nullopt;
    if (!text::is_token(*s)) {
      error(e.line, path, "invalid header name '" + *s + "': a header name is an HTTP token");
      return std::nullopt;
    }
    return s;
  }

  /// A rate; a count of 0 is reported here and still returned so that the cost checks run.
  std::optional<rate> rate_value(const entry& e, const std::string& path, std::string& text_out) {
    auto s = string(e.value, path, e.line);
    if (!s) return std::nullopt;
    text_out = *s;
    const auto r = text::parse_rate(*s);
    switch (r.error) {
      case text::rate_error::none:
        break;
      case text::rate_error::malformed:
        error(e.line, path,
              "invalid rate '" + *s + "': expected N/DURATION, such as 100/1m or 10/1s");
        return std::nullopt;
      case text::rate_error::negative:
        error(e.line, path, "negative rate " + *s + ": the count must be at least 1");
        return std::nullopt;
      case text::rate_error::fractional:
        error(e.line, path, "rate " + *s + ": the count must be a whole number");
        return std::nullopt;
      case text::rate_error::not_digits:
        error(e.line, path,
              "rate " + *s + ": expected the count as an integer written in digits, got " +
                  s->substr(0, s->find('/')));
        return std::nullopt;
      case text::rate_error::too_large:
        error(e.line, path,
              "rate " + *s + ": the count is above " + std::string(two_53) +
                  ", the largest integer the store arithmetic represents exactly");
        return std::nullopt;
      case text::rate_error::bad_period:
        error(e.line, path,
              "invalid rate '" + *s + "': '" + r.period_text +
                  "' is not a duration (a whole number and a unit ms, s, m, h or d)");
        return std::nullopt;
      case text::rate_error::zero_period:
        error(e.line, path, "rate " + *s + ": the period is shorter than 1ms");
        return std::nullopt;
      case text::rate_error::long_period:
        error(e.line, path, "rate " + *s + ": the period is longer than " + format_ms(max_period));
        return std::nullopt;
    }
    if (r.value.period > max_period) {
      error(e.line, path, "rate " + *s + ": the period is longer than " + format_ms(max_period));
      return std::nullopt;
    }
    if (r.value.count == 0)
      error(e.line, path, "rate " + *s + " never refills: the count must be at least 1");
    return r.value;
  }

  // --- limits ----------------------------------------------------------------------------

  /// The token bucket counts in units of 1/(period_ms / gcd(count, period_ms)) token so that a
  /// refill of `count` tokens per `period` ms is an integer number of units per ms; its
  /// capacity burst × units_per_token must stay an exact double (c06, part C).
  void check_capacity(const param_src& p, algorithm algo) {
    if (!p.usable || p.value.rate.count <= 0) return;
    if (algo == algorithm::sliding_window) {
      // The counter's estimate previous·(P − elapsed)/P + current is compared multiplied out
      // by the window P in ms (no rounding), so N·P must stay an exact double.
      const std::int64_t w = p.value.rate.period.count();
      if (p.value.rate.count > max_exact_integer / w)
        error(p.rate_line, p.rate_path,
              "rate " + p.rate_text + " cannot be counted exactly by sliding_window: count × " +
                  "window in ms = " + std::to_string(p.value.rate.count) + " × " +
                  std::to_string(w) + " is above " + std::string(two_53) +
                  " (use a shorter window or fixed_window)");
      return;
    }
    if (algo == algorithm::sliding_log) {
      // One stored stamp per unit, read whole on every check: memory and time grow with N.
      if (p.value.rate.count > max_log_units)
        error(p.rate_line, p.rate_path,
              "rate " + p.rate_text + " is too large for sliding_log, which stores one " +
                  "timestamp per unit: the count must be at most " + std::to_string(max_log_units) +
                  " (use sliding_window or token_bucket)");
      return;
    }
    if (is_window(algo)) return;
    const std::int64_t period = p.value.rate.period.count();
    const std::int64_t g = std::gcd(p.value.rate.count, period);
    const std::int64_t units = period / g;
    if (p.value.burst > max_exact_integer / units) {
      error(p.burst_line, p.burst_path,
            "burst " + std::to_string(p.value.burst) + " with rate " + p.rate_text +
                " cannot be counted exactly: one token is " + std::to_string(units) +
                " units (period_ms / gcd(count, period_ms) = " + std::to_string(period) + " / " +
                std::to_string(g) + "), and burst × " + std::to_string(units) + " is above " +
                std::string(two_53));
    }
  }

  /// Burst of a limit or override. Defaults to the count of its own rate.
  param_src params(const entry* rate_e, const entry* burst_e, const param_src* inherit,
                   const std::string& path, int line, algorithm algo) {
    param_src p;
    p.burst_path = path;
    p.burst_line = line;
    std::optional<rate> r;
    if (rate_e) {
      p.rate_path = join(path, "rate");
      p.rate_line = rate_e->line;
      r = rate_value(*rate_e, p.rate_path, p.rate_text);
    } else if (inherit) {
      p.rate_path = inherit->rate_path;
      p.rate_line = inherit->rate_line;
      p.rate_text = inherit->rate_text;
      if (inherit->usable) r = inherit->value.rate;
    }
    std::optional<std::int64_t> burst;
    if (burst_e) {
      p.burst_path = join(path, "burst");
      p.burst_line = burst_e->line;
      if (is_window(algo)) {
        error(burst_e->line, p.burst_path,
              std::string("burst applies only to token_bucket; a ") + algorithm_name(algo) +
                  " limit admits the count of its rate per window");
      }
      burst = integer(*burst_e, p.burst_path, "burst", 0, max_exact_integer);
    } else if (rate_e) {
      if (r) burst = r->count;
    } else if (inherit && inherit->usable) {
      burst = inherit->value.burst;
    }
    if (r && burst) {
      p.value.rate = *r;
      p.value.burst = *burst;
      p.usable = true;
    }
    return p;
  }

  /// A header field the gateway sets on forwarded requests (`shadow_header`,
  /// `decision_time_header`): an HTTP token that is not one the proxy frames, routes or
  /// identifies by, nor a rate-limit field of its own.
  std::optional<std::string> gateway_header(const entry& e, const std::string& path) {
    auto h = header_name(e, path);
    if (!h) return std::nullopt;
    std::string lower = *h;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    static const std::set<std::string> reserved{"host",
                                                "content-length",
                                                "transfer-encoding",
                                                "connection",
                                                "te",
                                                "trailer",
                                                "upgrade",
                                                "keep-alive",
                                                "proxy-connection",
                                                "x-forwarded-for",
                                                "via",
                                                "expect",
                                                "retry-after",
                                                "ratelimit",
                                                "ratelimit-policy",
                                                "x-ratelimit-limit",
                                                "x-ratelimit-remaining",
                                                "x-ratelimit-reset"};
    if (reserved.contains(lower)) {
      error(e.line, path,
            "'" + *h + "' is managed by the gateway; choose another name, such as X-Sluice-Shadow");
      return std::nullopt;
    }
    return h;
  }

  std::optional<limit_src> parse_limit(const YAML::Node& n, const std::string& path, int line) {
    static const std::vector<std::string> keys{"name",  "by",    "algorithm", "rate",
                                               "burst", "plans", "mode",      "preflight"};
    auto m = fields(n, path, line, keys);
    if (!m) return std::nullopt;
    limit_src l;
    l.path = path;
    l.value.line = line;
    l.name_path = path;
    l.name_line = line;

    if (const entry* e = m->find("name")) {
      l.name_path = join(path, "name");
      l.name_line = e->line;
      auto s = string(e->value, l.name_path, e->line);
      if (s && !valid_limit_name(*s)) {
        error(e->line, l.name_path, "limit name '" + *s + "' must match [A-Za-z0-9_-]{1,64}");
        s.reset();
      }
      if (s)
        l.value.name = *s;
      else
        l.usable = false;
    } else {
      error(line, path, "missing required key 'name'");
      l.usable = false;
    }

    if (const entry* e = m->find("by")) {
      const std::string p = join(path, "by");
      auto s = string(e->value, p, e->line);
      if (s && s->starts_with("header:")) {
        const std::string name = s->substr(7);
        if (name.empty()) {
          error(e->line, p, "'header:' needs a header name, such as header:X-Tenant");
          l.usable = false;
        } else if (!text::is_token(name)) {
          error(e->line, p, "invalid header name '" + name + "': a header name is an HTTP token");
          l.usable = false;
        } else {
          l.value.by = identity_kind::header;
          l.value.header_name = name;
        }
      } else if (s) {
        auto k = choice<identity_kind>(e->value, p, e->line, "identity",
                                       {{"api_key", identity_kind::api_key},
                                        {"user", identity_kind::user},
                                        {"ip", identity_kind::ip},
                                        {"global", identity_kind::global},
                                        {"header:NAME", identity_kind::header}});
        if (k)
          l.value.by = *k;  // "header:NAME" itself lands in the branch above
        else
          l.usable = false;
      } else {
        l.usable = false;
      }
    }

    if (const entry* e = m->find("algorithm")) {
      const std::string p = join(path, "algorithm");
      auto a = choice<algorithm>(e->value, p, e->line, "algorithm",
                                 {{"token_bucket", algorithm::token_bucket},
                                  {"fixed_window", algorithm::fixed_window},
                                  {"sliding_window", algorithm::sliding_window},
                                  {"sliding_log", algorithm::sliding_log},
                                  {"gcra", algorithm::gcra}});
      if (a) {
        l.value.algorithm = *a;
        if (*a == algorithm::gcra)
          error(e->line, p,
                "algorithm gcra is not supported yet (token_bucket gives the same limits)");
      } else {
        l.usable = false;
      }
    }

    if (const entry* e = m->find("mode")) {
      auto mode =
          choice<limit_mode>(e->value, join(path, "mode"), e->line, "mode",
                             {{"enforce", limit_mode::enforce}, {"shadow", limit_mode::shadow}});
      if (mode)
        l.value.mode = *mode;
      else
        l.usable = false;
    }

    // A preflight has no credentials: by default only limits that need none are charged.
    l.value.preflight = l.value.by == identity_kind::ip || l.value.by == identity_kind::global;
    if (const entry* e = m->find("preflight")) {
      if (auto v = boolean(*e, join(path, "preflight"))) l.value.preflight = *v;
    }

    const entry* rate_e = m->find("rate");
    const entry* burst_e = m->find("burst");
    const entry* plans_e = m->find("plans");
    if (rate_e) {
      l.defaults = params(rate_e, burst_e, nullptr, path, line, l.value.algorithm);
      check_capacity(*l.defaults, l.value.algorithm);
      if (!l.defaults->usable) l.usable = false;
    } else if (!plans_e || burst_e) {
      error(line, path, "missing required key 'rate'");
      l.usable = false;
    }

    if (plans_e) {
      const std::string plans_path = join(path, "plans");
      if (auto pm = mapping(plans_e->value, plans_path, plans_e->line, nullptr, true)) {
        static const std::vector<std::string> override_keys{"rate", "burst"};
        for (const entry& pe : pm->entries) {
          const std::string opath = join(plans_path, pe.key);
          l.plan_refs.push_back({pe.key, opath, pe.key_line});
          auto om = fields(pe.value, opath, pe.line, override_keys);
          if (!om) {
            l.usable = false;
            continue;
          }
          const entry* orate = om->find("rate");
          if (!orate && !l.defaults) {
            error(pe.line, opath, "missing required key 'rate' (the limit has no default rate)");
            l.usable = false;
            continue;
          }
          param_src p = params(orate, om->find("burst"), l.defaults ? &*l.defaults : nullptr, opath,
                               pe.line, l.value.algorithm);
          check_capacity(p, l.value.algorithm);
          if (!p.usable) l.usable = false;
          l.overrides.emplace_back(pe.key, std::move(p));
        }
      } else {
        l.usable = false;
      }
    }

    if (l.defaults) l.value.params = l.defaults->value;
    l.value.has_default_params = l.defaults.has_value();
    for (const auto& [plan, p] : l.overrides) l.value.plan_overrides[plan] = p.value;
    return l;
  }

  std::vector<limit_src> parse_limits(const entry& e, const std::string& path) {
    std::vector<limit_src> out;
    if (!sequence(e.value, path, e.line, true)) return out;
    std::size_t i = 0;
    for (const auto& item : e.value) {
      const std::string p = at(path, i++);
      if (auto l = parse_limit(item, p, line_of(item, e.line))) out.push_back(std::move(*l));
    }
    // Within one list a repeated name would check the same bucket twice per request.
    std::map<std::string, int> seen;
    for (auto& l : out) {
      if (l.value.name.empty()) continue;
      auto [it, fresh] = seen.emplace(l.value.name, l.name_line);
      if (!fresh) {
        error(l.name_line, l.name_path,
              "duplicate limit name '" + l.value.name + "' in this list (first at line " +
                  std::to_string(it->second) + ")");
        l.duplicate = true;
      }
    }
    return out;
  }

  /// A static cost above a bucket's capacity would be refused forever with a Retry-After that
  /// lies (DESIGN.md, "Semantics"; case c04): it is a config error. `where` names the route
  /// for plan limits, whose paths do not.
  void check_cost(const limit_src& l, std::int64_t cost, const std::string& where) {
    auto check = [&](const param_src& p) {
      if (!p.usable) return;
      if (is_window(l.value.algorithm)) {
        if (p.value.rate.count > 0 && cost > p.value.rate.count)
          error(p.rate_line, p.rate_path,
                "cost " + std::to_string(cost) + " can never be admitted by rate " + p.rate_text +
                    where);
      } else if (cost > p.value.burst) {
        error(p.burst_line, p.burst_path,
              "cost " + std::to_string(cost) + " can never be admitted by burst " +
                  std::to_string(p.value.burst) + where);
      }
    };
    if (l.defaults) check(*l.defaults);
    for (const auto& [plan, p] : l.overrides) check(p);
  }

  /// The first field in which two definitions of one limit name differ, if any.
  static std::optional<std::string> difference(const limit& a, const limit& b) {
    if (a.by != b.by || a.header_name != b.header_name) return "by";
    if (a.algorithm != b.algorithm) return "algorithm";
    if (a.has_default_params != b.has_default_params) return "rate";
    if (a.has_default_params) {
      if (a.params.rate.count != b.params.rate.count ||
          a.params.rate.period != b.params.rate.period)
        return "rate";
      if (a.params.burst != b.params.burst) return "burst";
    }
    if (a.plan_overrides.size() != b.plan_overrides.size()) return "plans";
    for (const auto& [plan, p] : a.plan_overrides) {
      auto it = b.plan_overrides.find(plan);
      if (it == b.plan_overrides.end() || !same_params(p, it->second)) return "plans";
    }
    if (a.mode != b.mode) return "mode";
    if (a.preflight != b.preflight) return "preflight";
    return std::nullopt;
  }

  // --- sections --------------------------------------------------------------------------

  void parse_store(const entry& e, rules& r) {
    static const std::vector<std::string> keys{"type",
                                               "address",
                                               "nodes",
                                               "timeout",
                                               "password_env",
                                               "local_share",
                                               "layout",
                                               "hash_groups",
                                               "max_buckets",
                                               "over_limit_cache",
                                               "sentinels",
                                               "master",
                                               "sentinel_password_env",
                                               "sentinel_timeout"};
    auto m = fields(e.value, "store", e.line, keys, true);
    if (!m) return;
    if (const entry* t = m->find("type")) {
      enum class kind { memory, redis, redis_cluster, redis_sentinel };
      auto k = choice<kind>(t->value, "store.type", t->line, "store type",
                            {{"memory", kind::memory},
                             {"redis", kind::redis},
                             {"redis-cluster", kind::redis_cluster},
                             {"redis-sentinel", kind::redis_sentinel}});
      if (k == kind::memory) r.store.type = store_settings::kind::memory;
      if (k == kind::redis) r.store.type = store_settings::kind::redis;
      if (k == kind::redis_sentinel) r.store.type = store_settings::kind::redis_sentinel;
      if (k == kind::redis_cluster) r.store.type = store_settings::kind::redis_cluster;
    }
    parse_sentinel_fields(e, *m, r);
    if (const entry* a = m->find("address")) {
      if (auto addr = address(*a, "store.address", false)) {
        r.store.host = addr->host;
        r.store.port = addr->port;
      }
    }
    parse_cluster_fields(e, *m, r);
    if (const entry* t = m->find("timeout")) {
      if (auto d = duration(*t, "store.timeout", "timeout", std::chrono::seconds{60}))
        r.store.timeout = *d;
    }
    if (const entry* p = m->find("password_env")) {
      if (auto s = env_name(*p, "store.password_env")) r.store.password_env = *s;
    }
    if (const entry* ls = m->find("local_share")) {
      if (auto s = string(ls->value, "store.local_share", ls->line)) {
        char* end = nullptr;
        const double v = std::strtod(s->c_str(), &end);
        if (s->empty() || end != s->c_str() + s->size())
          error(ls->line, "store.local_share", "expected a number, got '" + *s + "'");
        else if (!(v > 0.0 && v <= 1.0))
          error(ls->line, "store.local_share", "local_share must be in (0, 1], got " + *s);
        else
          r.store.local_share = v;
      }
    }
    if (const entry* l = m->find("layout")) {
      auto k = choice<store_settings::layout_kind>(
          l->value, "store.layout", l->line, "store layout",
          {{"hash", store_settings::layout_kind::hash}, {"key", store_settings::layout_kind::key}});
      if (k) r.store.layout = *k;
    }
    if (const entry* g = m->find("hash_groups")) {
      // As `burst` on a window limit: a setting the chosen layout never reads is a mistake
      // the operator should hear about, not a silent no-op.
      if (r.store.layout == store_settings::layout_kind::key)
        error(g->line, "store.hash_groups", "hash_groups applies only to layout hash");
      if (auto v = integer(*g, "store.hash_groups", "hash_groups", 1, 16'777'216))
        r.store.hash_groups = static_cast<std::uint32_t>(*v);
    }
    if (const entry* b = m->find("max_buckets")) {
      // The memory store's bound. Accepted with any store type (a file can switch between
      // memory and redis without editing it); 2^40 entries is far beyond any host's memory.
      if (auto v = integer(*b, "store.max_buckets", "max_buckets", 1, std::int64_t{1} << 40))
        r.store.max_buckets = static_cast<std::uint64_t>(*v);
    }
    if (const entry* c = m->find("over_limit_cache")) {
      if (auto v = boolean(*c, "store.over_limit_cache")) r.store.over_limit_cache = *v;
    }
  }

  /// The name of an environment variable (`[A-Za-z_][A-Za-z0-9_]*`), or nullopt (reported).
  std::optional<std::string> env_name(const entry& e, const std::string& path) {
    auto s = string(e.value, path, e.line);
    if (!s) return std::nullopt;
    const bool ok = !s->empty() && !std::isdigit(static_cast<unsigned char>(s->front())) &&
                    std::all_of(s->begin(), s->end(), [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                    });
    if (ok) return s;
    error(e.line, path,
          "invalid environment variable name '" + *s + "': expected [A-Za-z_][A-Za-z0-9_]*");
    return std::nullopt;
  }

  /// `store.nodes` (type redis-cluster only, which needs a non-empty list of `host:port`
  /// seeds) and `address` (not with redis-cluster: the nodes come from the cluster).
  void parse_cluster_fields(const entry& e, const map_view& m, rules& r) {
    const bool cluster = r.store.type == store_settings::kind::redis_cluster;
    const entry* n = m.find("nodes");
    if (n && !cluster) error(n->key_line, "store.nodes", "applies only to type redis-cluster");
    if (!cluster) return;
    if (const entry* a = m.find("address"))
      error(a->key_line, "store.address",
            "type redis-cluster finds its masters through store.nodes: remove address");
    const std::string empty = "the list is empty: name at least one cluster node (host:port)";
    if (!n) {
      error(e.line, "store.nodes",
            "type redis-cluster needs nodes: seed nodes of the cluster (host:port list)");
    } else if (sequence(n->value, "store.nodes", n->line, true)) {
      std::size_t i = 0;
      for (const auto& item : n->value) {
        entry ie{"", n->line, item, line_of(item, n->line)};
        if (auto a = address(ie, at("store.nodes", i++), false))
          r.store.nodes.push_back({a->host, a->port});
      }
      if (i == 0) error(n->line, "store.nodes", empty);
    } else if (n->value.IsNull()) {
      error(n->line, "store.nodes", empty);
    }
  }

  /// `store.sentinels`, `master`, `sentinel_password_env`, `sentinel_timeout` (type
  /// redis-sentinel only, which needs the first two) and `address` (not with redis-sentinel).
  void parse_sentinel_fields(const entry& e, const map_view& m, rules& r) {
    const bool sentinel = r.store.type == store_settings::kind::redis_sentinel;
    for (const char* key : {"sentinels", "master", "sentinel_password_env", "sentinel_timeout"}) {
      if (const entry* f = m.find(key); f && !sentinel)
        error(f->key_line, std::string("store.") + key, "applies only to type redis-sentinel");
    }
    if (!sentinel) return;
    if (const entry* a = m.find("address"))
      error(a->key_line, "store.address",
            "type redis-sentinel finds the master through store.sentinels: remove address");
    if (const entry* n = m.find("sentinels")) {
      if (sequence(n->value, "store.sentinels", n->line, true)) {
        std::size_t i = 0;
        for (const auto& item : n->value) {
          entry ie{"", n->line, item, line_of(item, n->line)};
          if (auto a = address(ie, at("store.sentinels", i++), false))
            r.store.sentinels.push_back({a->host, a->port});
        }
        if (i == 0)
          error(n->line, "store.sentinels",
                "the list is empty: name at least one Sentinel (host:port)");
      } else if (n->value.IsNull()) {
        error(n->line, "store.sentinels",
              "the list is empty: name at least one Sentinel (host:port)");
      }
    } else {
      error(e.line, "store.sentinels",
            "type redis-sentinel needs sentinels: the Sentinels to ask (host:port list)");
    }
    if (const entry* n = m.find("master")) {
      if (auto s = string(n->value, "store.master", n->line)) {
        // A master name is one word: Sentinel's messages separate their fields with spaces.
        const bool ok = !s->empty() && std::none_of(s->begin(), s->end(), [](char c) {
          return std::isspace(static_cast<unsigned char>(c)) ||
                 std::iscntrl(static_cast<unsigned char>(c));
        });
        if (ok)
          r.store.master_name = *s;
        else
          error(n->line, "store.master",
                "invalid master name '" + *s +
                    "': expected the name the Sentinels monitor (one word)");
      }
    } else {
      error(e.line, "store.master",
            "type redis-sentinel needs master: the name the Sentinels monitor the master under");
    }
    if (const entry* p = m.find("sentinel_password_env")) {
      if (auto s = env_name(*p, "store.sentinel_password_env")) r.store.sentinel_password_env = *s;
    }
    if (const entry* t = m.find("sentinel_timeout")) {
      if (auto d =
              duration(*t, "store.sentinel_timeout", "sentinel_timeout", std::chrono::seconds{10}))
        r.store.sentinel_timeout = *d;
    }
  }

  void parse_headers(const entry& e, rules& r) {
    if (!sequence(e.value, "headers", e.line)) return;
    r.headers = header_sets{false, false};
    std::size_t i = 0;
    for (const auto& item : e.value) {
      enum class set { x_ratelimit, ietf };
      auto s = choice<set>(item, at("headers", i++), line_of(item, e.line), "header set",
                           {{"x-ratelimit", set::x_ratelimit}, {"ietf", set::ietf}});
      if (s == set::x_ratelimit) r.headers.x_ratelimit = true;
      if (s == set::ietf) r.headers.ietf = true;
    }
  }

  /// `client:` deadlines and caps of client connections. `legacy` is the top-level
  /// `client_timeout:` (when given): the value of each timeout this section leaves out.
  void parse_client(const entry* e, std::optional<std::chrono::milliseconds> legacy, rules& r) {
    client_settings& c = r.client;
    if (legacy) c.header_timeout = c.keepalive_timeout = c.body_timeout = c.send_timeout = *legacy;
    if (!e) return;
    static const std::vector<std::string> keys{
        "header_timeout", "keepalive_timeout", "body_timeout",   "send_timeout", "max_connections",
        "max_headers",    "max_header_size",   "max_uri_length", "body_min_rate"};
    auto m = fields(e->value, "client", e->line, keys, true);
    if (!m) return;
    auto timeout = [&](const char* key, std::chrono::milliseconds& out) {
      if (const entry* t = m->find(key)) {
        if (auto d = duration(*t, join("client", key), key, std::chrono::hours{1})) out = *d;
      }
    };
    timeout("header_timeout", c.header_timeout);
    timeout("keepalive_timeout", c.keepalive_timeout);
    timeout("body_timeout", c.body_timeout);
    timeout("send_timeout", c.send_timeout);
    if (const entry* t = m->find("max_connections")) {
      if (t->value.IsScalar() && t->value.Scalar() == "auto") {
        c.max_connections = 0;
      } else if (auto v = integer(*t, "client.max_connections", "max_connections", 1, 1'000'000)) {
        c.max_connections = static_cast<std::uint64_t>(*v);
      }
    }
    if (const entry* t = m->find("max_headers")) {
      if (auto v = integer(*t, "client.max_headers", "max_headers", 1, 10'000))
        c.max_headers = static_cast<std::uint32_t>(*v);
    }
    auto bytes = [&](const char* key, std::uint64_t min, const char* min_text, std::uint64_t& out) {
      const entry* t = m->find(key);
      if (!t) return;
      const std::string path = join("client", key);
      auto v = size(*t, path);
      if (!v) return;
      constexpr std::uint64_t max = 1024 * 1024;
      if (*v < min || *v > max) {
        error(t->line, path,
              std::string(key) + " must be at least " + min_text + " and at most 1MiB, got " +
                  t->value.Scalar());
        return;
      }
      out = *v;
    };
    if (const entry* t = m->find("body_min_rate")) {
      // A size per second: `1KiB/s`, or 0 for none.
      auto text = string(t->value, "client.body_min_rate", t->line);
      if (text) {
        const bool per_second = text->size() > 2 && text->ends_with("/s");
        const auto r = text::parse_size(per_second ? text->substr(0, text->size() - 2) : *text);
        if (*text == "0")
          c.body_min_rate = 0;
        else if (!per_second || r.error != text::size_error::none || r.value == unlimited_size ||
                 r.value == 0 || r.value > 1024ull * 1024 * 1024)
          error(t->line, "client.body_min_rate",
                "invalid rate '" + *text +
                    "': expected bytes per second with an optional unit, such as 1KiB/s (at "
                    "most 1GiB/s), or 0 for none");
        else
          c.body_min_rate = r.value;
      }
    }
    bytes("max_header_size", 1024, "1KiB", c.max_header_size);
    bytes("max_uri_length", 1, "1 byte", c.max_uri_length);
  }

  void parse_upstreams(const entry& e, rules& r) {
    auto m = mapping(e.value, "upstreams", e.line, nullptr, true);
    if (!m) return;
    static const std::vector<std::string> keys{"url", "connect_timeout", "timeout"};
    for (const entry& ue : m->entries) {
      const std::string path = join("upstreams", ue.key);
      upstream u;
      u.name = ue.key;
      // Registered even when broken so that routes naming it are not reported twice.
      r.upstreams[u.name] = u;
      auto um = fields(ue.value, path, ue.line, keys);
      if (!um) continue;
      if (const entry* url = um->find("url")) {
        const std::string p = join(path, "url");
        if (auto s = string(url->value, p, url->line)) {
          std::string why;
          u.url = *s;
          if (!text::parse_http_url(*s, u, why))
            error(url->line, p, "invalid url '" + *s + "': " + why);
        }
      } else {
        error(ue.line, path, "missing required key 'url'");
      }
      if (const entry* t = um->find("connect_timeout")) {
        if (auto d = duration(*t, join(path, "connect_timeout"), "connect_timeout",
                              std::chrono::minutes{10}))
          u.connect_timeout = *d;
      }
      if (const entry* t = um->find("timeout")) {
        if (auto d = duration(*t, join(path, "timeout"), "timeout", std::chrono::hours{1}))
          u.timeout = *d;
      }
      r.upstreams[u.name] = u;
    }
  }

  void parse_identity(const entry& e, rules& r) {
    static const std::vector<std::string> keys{"api_key",     "user",        "trusted_proxies",
                                               "unknown_key", "ipv6_prefix", "ipv4_prefix",
                                               "directory",   "forwarded"};
    auto m = fields(e.value, "identity", e.line, keys, true);
    if (!m) return;
    if (const entry* a = m->find("api_key")) {
      static const std::vector<std::string> ak{"header", "query"};
      if (auto am = fields(a->value, "identity.api_key", a->line, ak)) {
        // Naming any source replaces the default: `{query: key}` means the query only.
        r.identity.api_key_header.clear();
        if (const entry* h = am->find("header")) {
          if (auto s = header_name(*h, "identity.api_key.header")) r.identity.api_key_header = *s;
        }
        if (const entry* q = am->find("query")) {
          if (auto s = non_empty(*q, "identity.api_key.query")) r.identity.api_key_query = *s;
        }
        if (!am->find("header") && !am->find("query"))
          error(a->line, "identity.api_key", "api_key needs a header or a query parameter");
      }
    }
    if (const entry* u = m->find("user")) {
      static const std::vector<std::string> uk{"header"};
      if (auto um = fields(u->value, "identity.user", u->line, uk)) {
        if (const entry* h = um->find("header")) {
          if (auto s = header_name(*h, "identity.user.header")) r.identity.user_header = *s;
        } else {
          error(u->line, "identity.user", "missing required key 'header'");
        }
      }
    }
    if (const entry* t = m->find("trusted_proxies")) {
      const std::string path = "identity.trusted_proxies";
      if (sequence(t->value, path, t->line, true)) {
        std::size_t i = 0;
        for (const auto& item : t->value) {
          const std::string p = at(path, i++);
          const int line = line_of(item, t->line);
          auto s = string(item, p, line);
          if (!s) continue;
          std::string why;
          if (auto c = text::parse_cidr(*s, why))
            r.identity.trusted_proxies.push_back(*c);
          else
            error(line, p, "invalid CIDR '" + *s + "': " + why);
        }
      }
    }
    if (const entry* u = m->find("unknown_key")) {
      auto k = choice<unknown_key_policy>(
          u->value, "identity.unknown_key", u->line, "policy",
          {{"anonymous", unknown_key_policy::anonymous}, {"reject", unknown_key_policy::reject}});
      if (k) r.identity.unknown_key = *k;
    }
    if (const entry* p = m->find("ipv6_prefix")) {
      if (auto v = integer(*p, "identity.ipv6_prefix", "ipv6_prefix", 1, 128))
        r.identity.ipv6_prefix = static_cast<int>(*v);
    }
    if (const entry* p = m->find("ipv4_prefix")) {
      if (auto v = integer(*p, "identity.ipv4_prefix", "ipv4_prefix", 1, 32))
        r.identity.ipv4_prefix = static_cast<int>(*v);
    }
    if (const entry* d = m->find("directory")) parse_directory(*d, r);
    if (const entry* f = m->find("forwarded")) {
      auto k = choice<forwarded_header>(f->value, "identity.forwarded", f->line, "header",
                                        {{"x-forwarded-for", forwarded_header::x_forwarded_for},
                                         {"rfc7239", forwarded_header::rfc7239}});
      if (k) r.identity.forwarded = *k;
    }
  }

  /// One `cors.origins` entry; reports (and returns nullopt for) a pattern that can never
  /// equal an origin a browser sends (Fetch standard §3.2.5, "serialization of an origin":
  /// lower case, no path, no default port).
  std::optional<origin_pattern> origin(const std::string& s, const std::string& path, int line) {
    origin_pattern o;
    o.text = s;
    if (s == "*") {
      o.any = true;
      return o;
    }
    auto bad = [&](const std::string& why) {
      error(line, path, "origin '" + s + "' " + why);
      return std::nullopt;
    };
    if (s == "null")
      return bad("is sent by sandboxed and local pages of any site, so it cannot be allowed");
    const auto sep = s.find("://");
    if (sep == std::string::npos || sep == 0)
      return bad(
          "never matches: an origin is scheme://host[:port], such as https://app.example.com");
    o.scheme = s.substr(0, sep);
    std::string rest = s.substr(sep + 3);
    if (std::any_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
      std::string lower = s;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      return bad("never matches: browsers send origins in lower case; write '" + lower + "'");
    }
    if (!std::all_of(o.scheme.begin(), o.scheme.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' ||
                 c == '.';
        }))
      return bad("never matches: the scheme '" + o.scheme + "' is not a URL scheme");
    if (const auto slash = rest.find_first_of("/?#"); slash != std::string::npos)
      return bad("never matches: an origin has no path, query or fragment; write '" + o.scheme +
                 "://" + rest.substr(0, slash) + "'");
    // host [":" port]; an IPv6 host is bracketed.
    std::string host = rest;
    if (!rest.empty() && rest.front() == '[') {
      const auto close = rest.find(']');
      if (close == std::string::npos) return bad("never matches: an unclosed '['");
      host = rest.substr(0, close + 1);
      if (close + 1 < rest.size()) {
        if (rest[close + 1] != ':') return bad("never matches: text after the host");
        o.port = rest.substr(close + 2);
        if (o.port.empty()) return bad("never matches: an empty port");
      }
    } else if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
      host = rest.substr(0, colon);
      o.port = rest.substr(colon + 1);
      if (o.port.empty()) return bad("never matches: an empty port");
    }
    if (o.port != "*" && !o.port.empty()) {
      const bool digits =
          std::all_of(o.port.begin(), o.port.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || o.port.size() > 5 || o.port.front() == '0' || std::stol(o.port) > 65535)
        return bad("never matches: the port '" + o.port + "' is not 1..65535");
      if ((o.scheme == "http" && o.port == "80") || (o.scheme == "https" && o.port == "443"))
        return bad("never matches: browsers leave out the default port; write '" + o.scheme +
                   "://" + host + "'");
    }
    if (host.starts_with("*.")) {
      o.any_subdomain = true;
      host = host.substr(1);  // ".example.com": what a matching host ends with
    }
    const auto wild_ok = host.find('*') == std::string::npos;
    if (!wild_ok || host.empty() || host == ".")
      return bad(
          "never matches: '*' stands for the whole origin ('*'), whole labels at the "
          "start of the host (https://*.example.com) or the port (http://localhost:*)");
    const bool v6 = host.front() == '[';
    if (!v6 && (!std::all_of(host.begin(), host.end(),
                             [](char c) {
                               return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                                      c == '-' || c == '.';
                             }) ||
                host.back() == '.' || host.find("..") != std::string::npos ||
                (!o.any_subdomain && host.front() == '.')))
      return bad("never matches: '" + host + "' is not a host name or address");
    o.host = host;
    return o;
  }

  /// A list of tokens (methods, header names) or `*` at `path`; nullopt after an error.
  /// `upper`: upper-case each item (methods, as routes do).
  std::optional<std::vector<std::string>> token_list(const entry& e, const std::string& path,
                                                     bool upper, const char* what) {
    if (!sequence(e.value, path, e.line, true)) {
      if (e.value.IsNull()) return std::vector<std::string>{};
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool ok = true;
    std::size_t i = 0;
    for (const auto& item : e.value) {
      const std::string p = at(path, i++);
      const int line = line_of(item, e.line);
      auto s = string(item, p, line);
      if (!s) {
        ok = false;
        continue;
      }
      if (*s != "*" && !text::is_token(*s)) {
        error(line, p, "invalid " + std::string(what) + " '" + *s + "': an HTTP token or '*'");
        ok = false;
        continue;
      }
      std::string v = *s;
      if (upper)
        std::transform(v.begin(), v.end(), v.begin(),
                       [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    if (!ok) return std::nullopt;
    return out;
  }

  /// A `cors:` block at `path` (top level or a route's).
  std::shared_ptr<const cors_policy> parse_cors(const entry& e, const std::string& path) {
    static const std::vector<std::string> keys{
        "origins", "methods", "headers", "expose_headers", "max_age", "credentials", "preflight"};
    auto m = fields(e.value, path, e.line, keys);
    if (!m) return nullptr;
    auto c = std::make_shared<cors_policy>();
    c->line = e.line;
    const std::size_t errors = diags_.size();
    if (const entry* b = m->find("credentials")) {
      if (auto v = boolean(*b, join(path, "credentials"))) c->credentials = *v;
    }
    if (const entry* o = m->find("origins")) {
      const std::string p = join(path, "origins");
      if (sequence(o->value, p, o->line)) {
        std::size_t i = 0;
        for (const auto& item : o->value) {
          const std::string ip = at(p, i++);
          const int line = line_of(item, o->line);
          auto s = string(item, ip, line);
          if (!s) continue;
          auto pat = origin(*s, ip, line);
          if (!pat) continue;
          if (pat->any && c->credentials)
            error(line, ip,
                  "origin '*' with credentials: true would let every site make credentialed "
                  "requests (and browsers refuse '*' with credentials); list the origins");
          else
            c->origins.push_back(std::move(*pat));
        }
        if (o->value.size() == 0) error(o->line, p, "origins must list at least one origin");
      }
    } else {
      error(e.line, path, "missing required key 'origins'");
    }
    if (const entry* l = m->find("methods")) {
      if (auto v = token_list(*l, join(path, "methods"), true, "method")) c->methods = *v;
    }
    if (const entry* l = m->find("headers")) {
      if (auto v = token_list(*l, join(path, "headers"), false, "header name")) c->headers = *v;
    }
    if (const entry* l = m->find("expose_headers")) {
      if (auto v = token_list(*l, join(path, "expose_headers"), false, "header name"))
        c->expose_headers = *v;
    }
    if (c->credentials) {
      // With credentials, '*' is a literal name to browsers, never a wildcard (Fetch §3.2.3).
      for (const char* k : {"methods", "headers", "expose_headers"}) {
        const auto& list = std::string_view(k) == "methods"   ? c->methods
                           : std::string_view(k) == "headers" ? c->headers
                                                              : c->expose_headers;
        if (std::find(list.begin(), list.end(), "*") != list.end()) {
          const entry* l = m->find(k);
          error(l ? l->line : e.line, join(path, k),
                "'*' with credentials: true is not a wildcard to browsers; list the names");
        }
      }
    }
    if (const entry* a = m->find("max_age")) {
      if (auto d = duration(*a, join(path, "max_age"), "max_age", std::chrono::hours{24})) {
        if (d->count() % 1000 != 0)
          error(a->line, join(path, "max_age"), "max_age must be whole seconds");
        else
          c->max_age_seconds = d->count() / 1000;
      }
    }
    if (const entry* f = m->find("preflight")) {
      auto k = choice<preflight_mode>(
          f->value, join(path, "preflight"), f->line, "preflight mode",
          {{"answer", preflight_mode::answer}, {"forward", preflight_mode::forward}});
      if (k) c->preflight = *k;
    }
    if (diags_.size() != errors) return nullptr;
    return c;
  }

  /// `identity.directory:` a Redis hash of key → plan behind a per-worker cache.
  void parse_directory(const entry& e, rules& r) {
    static const std::vector<std::string> keys{"type", "hash", "cache_ttl", "negative_ttl",
                                               "cache_size"};
    const std::string path = "identity.directory";
    auto m = fields(e.value, path, e.line, keys);
    if (!m) return;
    directory_line_ = e.line;
    r.identity.directory.enabled = true;
    if (const entry* t = m->find("type")) {
      enum class kind { redis };
      choice<kind>(t->value, join(path, "type"), t->line, "directory type",
                   {{"redis", kind::redis}});
    } else {
      error(e.line, path, "missing required key 'type'");
    }
    if (const entry* h = m->find("hash")) {
      if (auto s = non_empty(*h, join(path, "hash"))) r.identity.directory.hash = *s;
    }
    if (const entry* t = m->find("cache_ttl")) {
      if (auto d = duration(*t, join(path, "cache_ttl"), "cache_ttl", std::chrono::hours{24}))
        r.identity.directory.cache_ttl = *d;
    }
    if (const entry* t = m->find("negative_ttl")) {
      if (auto d = duration(*t, join(path, "negative_ttl"), "negative_ttl", std::chrono::hours{24}))
        r.identity.directory.negative_ttl = *d;
    }
    if (const entry* c = m->find("cache_size")) {
      if (auto v = integer(*c, join(path, "cache_size"), "cache_size", 1, 100'000'000))
        r.identity.directory.cache_size = static_cast<std::size_t>(*v);
    }
  }

  void parse_plans(const entry& e) {
    auto m = mapping(e.value, "plans", e.line, nullptr, true);
    if (!m) return;
    static const std::vector<std::string> keys{"limits"};
    for (const entry& pe : m->entries) {
      plan_src p;
      p.name = pe.key;
      p.path = join("plans", pe.key);
      if (auto pm = fields(pe.value, p.path, pe.line, keys, true)) {
        if (const entry* l = pm->find("limits"))
          p.limits = parse_limits(*l, join(p.path, "limits"));
      }
      plans_.push_back(std::move(p));
    }
  }

  void parse_api_keys(const entry& e) {
    auto m = mapping(e.value, "api_keys", e.line, nullptr, true);
    if (!m) return;
    for (const entry& ke : m->entries) {
      const std::string path = join("api_keys", ke.key);
      if (ke.key.empty()) {
        error(ke.key_line, "api_keys", "an API key must not be empty");
        continue;
      }
      if (auto s = string(ke.value, path, ke.line))
        api_keys_.push_back({ke.key, *s, path, ke.line});
    }
  }

  void parse_routes(const entry& e) {
    if (!sequence(e.value, "routes", e.line, true)) return;
    static const std::vector<std::string> keys{"name",
                                               "match",
                                               "upstream",
                                               "cost",
                                               "on_store_failure",
                                               "limits",
                                               "max_request_body",
                                               "max_response_body",
                                               "upgrade",
                                               "tunnel_idle_timeout",
                                               "cors"};
    static const std::vector<std::string> match_keys{"path", "path_prefix", "path_glob", "methods",
                                                     "host"};
    std::size_t i = 0;
    for (const auto& item : e.value) {
      route_src rs;
      rs.path = at("routes", i++);
      const int line = line_of(item, e.line);
      rs.value.line = line;
      auto m = fields(item, rs.path, line, keys);
      if (!m) continue;

      if (const entry* n = m->find("name")) {
        rs.name_path = join(rs.path, "name");
        rs.name_line = n->line;
        if (auto s = non_empty(*n, rs.name_path)) rs.value.name = *s;
      } else {
        error(line, rs.path, "missing required key 'name'");
      }

      if (const entry* mt = m->find("match")) {
        const std::string mpath = join(rs.path, "match");
        if (auto mm = fields(mt->value, mpath, mt->line, match_keys)) {
          rs.value.match.path_prefix = "/";
          const entry* exact = mm->find("path");
          const entry* glob = mm->find("path_glob");
          const int kinds = (exact ? 1 : 0) + (glob ? 1 : 0) + (mm->find("path_prefix") ? 1 : 0);
          if (kinds > 1) {
            error(mt->line, mpath,
                  "use one of path, path_prefix and path_glob, not " + std::to_string(kinds));
          } else if (exact) {
            const std::string p = join(mpath, "path");
            if (auto s = string(exact->value, p, exact->line)) {
              if (match_path(*s, p, exact->line, "path")) {
                rs.value.match.kind = path_kind::exact;
                rs.value.match.path = *s;
              }
            }
          } else if (glob) {
            const std::string p = join(mpath, "path_glob");
            if (auto s = string(glob->value, p, glob->line)) {
              if (match_path(*s, p, glob->line, "path_glob") && glob_ok(*s, p, glob->line)) {
                rs.value.match.kind = path_kind::glob;
                rs.value.match.path = *s;
              }
            }
          }
          if (const entry* h = mm->find("host")) {
            const std::string p = join(mpath, "host");
            if (auto s = string(h->value, p, h->line)) {
              if (auto host = host_name(*s, p, h->line)) rs.value.match.host = *host;
            }
          }
          if (const entry* pp = mm->find("path_prefix"); pp && kinds == 1) {
            const std::string p = join(mpath, "path_prefix");
            if (auto s = string(pp->value, p, pp->line)) {
              const bool bad_char = std::any_of(s->begin(), s->end(), [](char c) {
                return static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '?' || c == '#';
              });
              if (s->empty() || s->front() != '/')
                error(pp->line, p, "path_prefix '" + *s + "' must start with '/'");
              else if (bad_char)
                error(pp->line, p,
                      "path_prefix '" + *s +
                          "' must not contain whitespace, control characters, '?' or '#'");
              else
                rs.value.match.path_prefix = *s;
            }
          }
          if (const entry* ms = mm->find("methods")) {
            const std::string p = join(mpath, "methods");
            if (sequence(ms->value, p, ms->line)) {
              std::size_t j = 0;
              for (const auto& mi : ms->value) {
                const std::string ip = at(p, j++);
                const int mline = line_of(mi, ms->line);
                auto s = string(mi, ip, mline);
                if (!s) continue;
                if (!text::is_token(*s)) {
                  error(mline, ip, "invalid method '" + *s + "': a method is an HTTP token");
                  continue;
                }
                std::string upper = *s;
                std::transform(upper.begin(), upper.end(), upper.begin(), [](char c) {
                  return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
                });
                auto& v = rs.value.match.methods;
                if (std::find(v.begin(), v.end(), upper) == v.end()) v.push_back(upper);
              }
            }
          }
        }
      } else {
        error(line, rs.path, "missing required key 'match'");
      }

      if (const entry* u = m->find("upstream")) {
        rs.upstream_path = join(rs.path, "upstream");
        rs.upstream_line = u->line;
        if (auto s = non_empty(*u, rs.upstream_path)) rs.value.upstream = *s;
      } else {
        error(line, rs.path, "missing required key 'upstream'");
      }

      if (const entry* c = m->find("cost")) {
        if (auto v = integer(*c, join(rs.path, "cost"), "cost", 1, max_exact_integer))
          rs.value.cost = *v;
        else
          rs.cost_ok = false;
      }

      if (const entry* f = m->find("on_store_failure")) {
        auto p = choice<failure_policy>(f->value, join(rs.path, "on_store_failure"), f->line,
                                        "failure policy",
                                        {{"fail_open", failure_policy::fail_open},
                                         {"fail_closed", failure_policy::fail_closed},
                                         {"local", failure_policy::local}});
        if (p) rs.value.on_store_failure = *p;
      }

      if (const entry* l = m->find("limits")) rs.limits = parse_limits(*l, join(rs.path, "limits"));
      if (const entry* b = m->find("max_request_body")) {
        if (auto v = size(*b, join(rs.path, "max_request_body"))) rs.value.max_request_body = *v;
      }
      if (const entry* b = m->find("max_response_body")) {
        if (auto v = size(*b, join(rs.path, "max_response_body"))) rs.value.max_response_body = *v;
      }
      if (const entry* u = m->find("upgrade")) {
        if (auto v = boolean(*u, join(rs.path, "upgrade"))) rs.value.upgrade = *v;
      }
      if (const entry* t = m->find("tunnel_idle_timeout")) {
        if (auto d = duration(*t, join(rs.path, "tunnel_idle_timeout"), "tunnel_idle_timeout",
                              std::chrono::hours{24}))
          rs.value.tunnel_idle_timeout = *d;
      }
      if (const entry* c = m->find("cors")) rs.value.cors = parse_cors(*c, join(rs.path, "cors"));
      routes_.push_back(std::move(rs));
    }
  }

  /// An exact path or glob pattern: starts with '/', no whitespace, control bytes, '?' or
  /// '#', and already canonical (a route written `/a//b` could never match, since requests
  /// are matched in canonical form).
  bool match_path(const std::string& s, const std::string& path, int line, std::string_view field) {
    const std::string f(field);
    const bool bad_char = std::any_of(s.begin(), s.end(), [](char c) {
      return static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '?' || c == '#';
    });
    if (s.empty() || s.front() != '/') {
      error(line, path, f + " '" + s + "' must start with '/'");
      return false;
    }
    if (bad_char) {
      error(line, path,
            f + " '" + s + "' must not contain whitespace, control characters, '?' or '#'");
      return false;
    }
    const bool repeated = s.find("//") != std::string::npos;
    bool dots = false;
    for (std::size_t pos = 0; pos < s.size();) {
      std::size_t end = s.find('/', pos + 1);
      if (end == std::string::npos) end = s.size();
      const std::string_view seg(s.data() + pos + 1, end - pos - 1);
      if (seg == "." || seg == "..") dots = true;
      pos = end;
    }
    if (repeated || dots || s.find('%') != std::string::npos) {
      error(line, path,
            f + " '" + s +
                "' is not canonical (repeated '/', a '.' or '..' segment, or a percent escape); "
                "requests are matched in canonical form, so it could never match");
      return false;
    }
    return true;
  }

  /// `*` and `**` only as whole segments; at most one `**`.
  bool glob_ok(const std::string& s, const std::string& path, int line) {
    int doubles = 0;
    for (std::size_t pos = 0; pos < s.size();) {
      std::size_t end = s.find('/', pos + 1);
      if (end == std::string::npos) end = s.size();
      const std::string_view seg(s.data() + pos + 1, end - pos - 1);
      if (seg.find('*') != std::string_view::npos && seg != "*" && seg != "**") {
        error(line, path,
              "path_glob '" + s + "': '" + std::string(seg) +
                  "' mixes '*' with other characters; '*' matches one whole segment and '**' "
                  "any number of segments");
        return false;
      }
      if (seg == "**") ++doubles;
      pos = end;
    }
    if (doubles > 1) {
      error(line, path, "path_glob '" + s + "' has more than one '**'");
      return false;
    }
    return true;
  }

  /// A host name or address to match the request's Host against, lower-cased; no port.
  std::optional<std::string> host_name(const std::string& s, const std::string& path, int line) {
    std::string h = s;
    std::transform(h.begin(), h.end(), h.begin(), [](char c) {
      return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    });
    const bool bracketed = h.size() > 2 && h.front() == '[' && h.back() == ']';
    const bool ok =
        !h.empty() && (bracketed || std::all_of(h.begin(), h.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
                       }));
    if (!bracketed && h.find(':') != std::string::npos) {
      error(line, path,
            "host '" + s + "' must not name a port; the request's port is ignored when matching");
      return std::nullopt;
    }
    if (!ok) {
      error(line, path, "invalid host '" + s + "': expected a host name such as api.example.com");
      return std::nullopt;
    }
    return h;
  }

  // --- cross-checks ----------------------------------------------------------------------

  void cross_check(const rules& r) {
    // Plan names: declared ones, plus the implicit `anonymous`.
    std::vector<std::string> plan_names;
    for (const auto& p : plans_) plan_names.push_back(p.name);
    if (std::find(plan_names.begin(), plan_names.end(), "anonymous") == plan_names.end())
      plan_names.emplace_back("anonymous");
    auto unknown_plan = [&](const std::string& name, int line, const std::string& path) {
      if (std::find(plan_names.begin(), plan_names.end(), name) != plan_names.end()) return;
      if (auto s = text::suggest(name, plan_names))
        error(line, path, "unknown plan '" + name + "'; did you mean '" + *s + "'?");
      else
        error(line, path, "unknown plan '" + name + "'; plans are " + list_of(plan_names));
    };
    for (const auto& k : api_keys_) unknown_plan(k.plan, k.line, k.path);
    if (r.identity.directory.enabled &&
        (!r.store.redis() || r.store.type == store_settings::kind::redis_cluster))
      error(directory_line_, "identity.directory",
            "a redis directory is read on the store's connection: it needs store.type redis "
            "or redis-sentinel");

    // Every limit, in file order, for the plan references and the one-name-one-bucket rule.
    std::vector<const limit_src*> all;
    for (const auto& p : plans_)
      for (const auto& l : p.limits) all.push_back(&l);
    for (const auto& rs : routes_)
      for (const auto& l : rs.limits) all.push_back(&l);
    std::stable_sort(all.begin(), all.end(), [](const limit_src* a, const limit_src* b) {
      return a->value.line < b->value.line;
    });
    std::map<std::string, const limit_src*> first;
    for (const limit_src* l : all) {
      for (const auto& ref : l->plan_refs) unknown_plan(ref.plan, ref.line, ref.path);
      if (!l->usable || l->duplicate) continue;
      auto [it, fresh] = first.emplace(l->value.name, l);
      if (fresh) continue;
      if (auto field = difference(it->second->value, l->value)) {
        error(l->value.line, l->path,
              "limit '" + l->value.name + "' differs in " + *field + " from " + it->second->path +
                  " (line " + std::to_string(it->second->value.line) +
                  "); one name is one bucket, so every definition must be identical");
      }
    }

    // Routes: names, upstreams, costs.
    std::vector<std::string> upstream_names;
    for (const auto& [name, u] : r.upstreams) upstream_names.push_back(name);
    std::map<std::string, int> route_names;
    for (const auto& rs : routes_) {
      if (!rs.value.name.empty()) {
        auto [it, fresh] = route_names.emplace(rs.value.name, rs.name_line);
        if (!fresh)
          error(rs.name_line, rs.name_path,
                "duplicate route name '" + rs.value.name + "' (first at line " +
                    std::to_string(it->second) + ")");
      }
      const std::string& up = rs.value.upstream;
      if (!up.empty() && !r.upstreams.contains(up)) {
        if (upstream_names.empty())
          error(rs.upstream_line, rs.upstream_path,
                "unknown upstream '" + up + "'; no upstreams are defined");
        else if (auto s = text::suggest(up, upstream_names))
          error(rs.upstream_line, rs.upstream_path,
                "unknown upstream '" + up + "'; did you mean '" + *s + "'?");
        else
          error(rs.upstream_line, rs.upstream_path,
                "unknown upstream '" + up + "'; upstreams are " + list_of(upstream_names));
      }
      if (!rs.cost_ok) continue;
      for (const auto& l : rs.limits) check_cost(l, rs.value.cost, "");
    }
    // Plan limits follow the caller onto every route, so each route's cost must fit them too.
    // With no routes, a request would still cost at least 1.
    for (const auto& p : plans_) {
      for (const auto& l : p.limits) {
        if (routes_.empty()) check_cost(l, 1, "");
        for (const auto& rs : routes_) {
          if (rs.cost_ok)
            check_cost(l, rs.value.cost,
                       " on route '" + (rs.value.name.empty() ? rs.path : rs.value.name) + "'");
        }
      }
    }
  }

  struct api_key_src {
    std::string key, plan, path;
    int line;
  };

  std::string file_;
  std::vector<diagnostic> diags_;
  std::vector<plan_src> plans_;
  std::vector<route_src> routes_;
  std::vector<api_key_src> api_keys_;
  int directory_line_ = 0;
};

// On redis-cluster: the enforced limits a request can carry with another enforced limit
// (a plan's and a route's together, or two of one list); see limit::split_on_cluster.
void mark_split_limits(rules& r) {
  auto enforced = [](const std::vector<limit>& ls) {
    return static_cast<std::size_t>(std::count_if(
        ls.begin(), ls.end(), [](const limit& l) { return l.mode == limit_mode::enforce; }));
  };
  std::size_t most_in_plan = 0, most_in_route = 0;
  for (const auto& [_, p] : r.plans) most_in_plan = std::max(most_in_plan, enforced(p.limits));
  for (const auto& rt : r.routes) most_in_route = std::max(most_in_route, enforced(rt.limits));
  for (auto& [_, p] : r.plans) {
    const bool split = enforced(p.limits) + most_in_route >= 2;
    for (auto& l : p.limits) l.split_on_cluster = split && l.mode == limit_mode::enforce;
  }
  for (auto& rt : r.routes) {
    const bool split = enforced(rt.limits) + most_in_plan >= 2;
    for (auto& l : rt.limits) l.split_on_cluster = split && l.mode == limit_mode::enforce;
  }
}

load_result loader::run(const YAML::Node& root) {
  if (root.IsNull()) {
    error(1, "", "the rules file is empty");
    return fail();
  }
  if (!root.IsMap()) {
    error(line_of(root, 1), "", "expected a mapping at the top level, got " + describe(root));
    return fail();
  }
  static const std::vector<std::string> keys{"listen",        "admin",
                                             "workers",       "store",
                                             "headers",       "retry_after_jitter",
                                             "drain_timeout", "client_timeout",
                                             "shadow_header", "decision_time_header",
                                             "upstreams",     "identity",
                                             "plans",         "api_keys",
                                             "routes",        "api_keys_file",
                                             "cors",          "client",
                                             "access_log"};
  auto top = fields(root, "", 1, keys);
  auto r = std::make_shared<rules>();
  r->source = file_;

  if (const entry* e = top->find("listen")) {
    if (auto a = address(*e, "listen", true)) {
      r->listen_host = a->host;
      r->listen_port = a->port;
    }
  }
  if (const entry* e = top->find("admin")) {
    if (auto a = address(*e, "admin", true)) {
      r->admin_host = a->host;
      r->admin_port = a->port;
    }
  }
  if (const entry* e = top->find("workers")) {
    if (auto v = integer(*e, "workers", "workers", 0, max_workers))
      r->workers = static_cast<unsigned>(*v);
  }
  if (const entry* e = top->find("store")) parse_store(*e, *r);
  if (const entry* e = top->find("headers")) parse_headers(*e, *r);
  if (const entry* e = top->find("retry_after_jitter")) {
    if (auto d = duration(*e, "retry_after_jitter", "retry_after_jitter", std::chrono::hours{1}))
      r->retry_after_jitter = *d;
  }
  {
    std::optional<std::chrono::milliseconds> legacy;
    if (const entry* e = top->find("client_timeout"))
      legacy = duration(*e, "client_timeout", "client_timeout", std::chrono::hours{1});
    parse_client(top->find("client"), legacy, *r);
  }
  if (const entry* e = top->find("drain_timeout")) {
    if (auto d = duration(*e, "drain_timeout", "drain_timeout", std::chrono::hours{1}))
      r->drain_timeout = *d;
  }
  if (const entry* e = top->find("access_log")) {
    static const std::vector<std::string> log_keys{"path", "format"};
    if (auto m = fields(e->value, "access_log", e->line, log_keys, true)) {
      if (const entry* p = m->find("path")) {
        if (auto text = string(p->value, "access_log.path", p->line)) {
          if (text->empty()) {
            error(p->line, "access_log.path", "path must not be empty (\"-\" is stdout)");
          } else {
            r->access_log_path = *text;
          }
        }
      } else {
        error(e->line, "access_log.path", "access_log needs a path (a file, or \"-\" for stdout)");
      }
      if (const entry* f = m->find("format")) {
        if (auto text = string(f->value, "access_log.format", f->line)) {
          if (*text == "json") {
            r->access_log_json = true;
          } else if (*text != "plain") {
            error(f->line, "access_log.format", "format must be plain or json, got " + *text);
          }
        }
      }
    }
  }
  if (const entry* e = top->find("shadow_header")) {
    if (auto h = gateway_header(*e, "shadow_header")) r->shadow_header = *h;
  }
  if (const entry* e = top->find("decision_time_header")) {
    if (auto h = gateway_header(*e, "decision_time_header")) r->decision_time_header = *h;
  }
  if (const entry* e = top->find("upstreams")) parse_upstreams(*e, *r);
  if (const entry* e = top->find("identity")) parse_identity(*e, *r);
  if (const entry* e = top->find("plans")) parse_plans(*e);
  if (const entry* e = top->find("api_keys")) parse_api_keys(*e);
  if (const entry* e = top->find("routes")) parse_routes(*e);
  if (const entry* e = top->find("cors")) r->cors = parse_cors(*e, "cors");

  cross_check(*r);
  if (!diags_.empty()) return fail();

  // The key file is read once the plans are known (its lines name them).
  if (const entry* e = top->find("api_keys_file")) {
    if (auto s = non_empty(*e, "api_keys_file")) {
      std::string file = *s;
      const auto slash = file_.rfind('/');
      if (file.front() != '/' && slash != std::string::npos)
        file = file_.substr(0, slash + 1) + file;  // relative to the rules file
      std::vector<std::string> names;
      for (const auto& p : plans_) names.push_back(p.name);
      if (std::find(names.begin(), names.end(), "anonymous") == names.end())
        names.emplace_back("anonymous");
      auto [keys, problems] = api_key_file::load(file, std::move(names));
      if (!keys) {
        error(e->line, "api_keys_file", "the key file '" + file + "' is invalid:");
        for (auto& d : problems) diags_.push_back(std::move(d));
        return {nullptr, std::move(diags_)};
      }
      r->api_keys_file = std::move(keys);
    }
    if (!diags_.empty()) return fail();
  }

  for (auto& p : plans_) {
    plan& out = r->plans[p.name];
    out.name = p.name;
    for (auto& l : p.limits) out.limits.push_back(std::move(l.value));
  }
  if (!r->plans.contains("anonymous")) r->plans["anonymous"].name = "anonymous";
  for (auto& k : api_keys_) r->api_keys[k.key] = k.plan;
  for (auto& rs : routes_) {
    for (auto& l : rs.limits) rs.value.limits.push_back(std::move(l.value));
    r->routes.push_back(std::move(rs.value));
  }
  if (r->store.type == store_settings::kind::redis_cluster) mark_split_limits(*r);
  return {std::move(r), {}};
}

}  // namespace

load_result load_string(std::string_view text, std::string file) {
  loader l(file);
  try {
    const std::vector<YAML::Node> docs = YAML::LoadAll(std::string(text));
    if (docs.size() > 1) {
      l.error(line_of(docs[1], 0), "",
              "expected one YAML document, found " + std::to_string(docs.size()));
      return l.fail();
    }
    return l.run(docs.empty() ? YAML::Node() : docs.front());
  } catch (const YAML::Exception& e) {
    l.error(e.mark.is_null() ? 0 : e.mark.line + 1, "", "invalid YAML: " + e.msg);
  } catch (const std::exception& e) {
    l.error(0, "", std::string("internal error while loading: ") + e.what());
  } catch (...) {
    l.error(0, "", "internal error while loading");
  }
  return l.fail();
}

load_result load_file(const std::string& path) {
  std::string content;
  if (std::string why = file::read_regular(path, max_rules_file_bytes, content); !why.empty()) {
    load_result out;
    out.diagnostics.push_back({path, 0, "", std::move(why)});
    return out;
  }
  return load_string(content, path);
}

std::string listen_address::to_string() const {
  const std::string p = std::to_string(port);
  return host.find(':') == std::string::npos ? host + ":" + p : "[" + host + "]:" + p;
}

std::optional<listen_address> parse_listen_address(std::string_view text, std::string& error) {
  auto a = check_address(text, true, error);
  if (!a) return std::nullopt;
  return listen_address{a->host, a->port};
}

std::optional<unsigned> parse_workers(std::string_view text, std::string& error) {
  auto v = check_integer(text, "workers", 0, max_workers, error);
  if (!v) return std::nullopt;
  return static_cast<unsigned>(*v);
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  const auto r = text::parse_duration(text);
  if (r.error != text::duration_error::none) return std::nullopt;
  return r.value;
}

std::optional<rate> parse_rate(std::string_view text) {
  const auto r = text::parse_rate(text);
  if (r.error != text::rate_error::none) return std::nullopt;
  return r.value;
}

}  // namespace sluice::config
