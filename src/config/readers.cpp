// SPDX-License-Identifier: Apache-2.0
// The loader's shared YAML readers: the shape of a node (a mapping with its allowed keys and
// duplicates, a sequence) and each kind of scalar (string, boolean, integer, size, duration,
// address, header name, rate, environment variable name), each reporting its own diagnostic.

#include "config/loader_internal.hpp"

#include <cstdlib>

#include <boost/asio/ip/address.hpp>

namespace sluice::config::detail {

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string at(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

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

bool valid_limit_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

bool same_params(const limit_params& a, const limit_params& b) {
  return a.rate.count == b.rate.count && a.rate.period == b.rate.period && a.burst == b.burst &&
         a.rate.unit == b.rate.unit && a.rate.utc_offset_minutes == b.rate.utc_offset_minutes;
}

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

std::optional<map_view> loader::mapping(const YAML::Node& n, const std::string& path, int line,
                                        const std::vector<std::string>* allowed, bool empty_ok,
                                        bool secret_keys) {
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
    const std::string key_path = secret_keys ? path : join(path, e.key);
    // yaml-cpp keeps both pairs of a repeated key and `node[key]` returns the first:
    // a silent override that an operator would never notice, so it is an error.
    if (const entry* first = out.find(e.key)) {
      const std::string named = secret_keys ? "" : " '" + e.key + "'";
      error(key_line, key_path,
            "duplicate key" + named + " (first at line " + std::to_string(first->key_line) + ")");
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

std::optional<map_view> loader::fields(const YAML::Node& n, const std::string& path, int line,
                                       const std::vector<std::string>& allowed, bool empty_ok) {
  return mapping(n, path, line, &allowed, empty_ok);
}

bool loader::sequence(const YAML::Node& n, const std::string& path, int line, bool empty_ok) {
  if (n.IsSequence()) return true;
  if (empty_ok && n.IsNull()) return false;
  error(line, path, "expected a list, got " + describe(n));
  return false;
}

std::optional<std::string> loader::string(const YAML::Node& n, const std::string& path, int line) {
  if (n.IsScalar()) return n.Scalar();
  error(line, path, "expected a string, got " + describe(n));
  return std::nullopt;
}

std::optional<bool> loader::boolean(const entry& e, const std::string& path) {
  auto s = string(e.value, path, e.line);
  if (!s) return std::nullopt;
  if (*s == "true") return true;
  if (*s == "false") return false;
  error(e.line, path, "expected true or false, got '" + *s + "'");
  return std::nullopt;
}

std::optional<std::string> loader::non_empty(const entry& e, const std::string& path) {
  auto s = string(e.value, path, e.line);
  if (s && s->empty()) {
    error(e.line, path, "must not be empty");
    return std::nullopt;
  }
  return s;
}

std::optional<std::int64_t> loader::integer(const entry& e, const std::string& path,
                                            std::string_view field, std::int64_t min,
                                            std::int64_t max) {
  if (!e.value.IsScalar()) {
    error(e.line, path, "expected an integer, got " + describe(e.value));
    return std::nullopt;
  }
  std::string message;
  auto v = check_integer(e.value.Scalar(), field, min, max, message);
  if (!v) error(e.line, path, std::move(message));
  return v;
}

std::optional<std::uint64_t> loader::size(const entry& e, const std::string& path) {
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

std::optional<double> loader::share(const entry& e, const std::string& path,
                                    std::string_view field) {
  auto s = string(e.value, path, e.line);
  if (!s) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s->c_str(), &end);
  if (s->empty() || end != s->c_str() + s->size()) {
    error(e.line, path, "expected a number, got '" + *s + "'");
    return std::nullopt;
  }
  if (!(v > 0.0 && v <= 1.0)) {
    error(e.line, path, std::string(field) + " must be in (0, 1], got " + *s);
    return std::nullopt;
  }
  return v;
}

std::optional<std::chrono::milliseconds> loader::duration(const entry& e, const std::string& path,
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
        std::string(field) + " " + *s + " is longer than the maximum of " + duration_text(max));
  return std::nullopt;
}

std::optional<text::address> loader::address(const entry& e, const std::string& path,
                                             bool allow_zero) {
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

std::optional<std::string> loader::header_name(const entry& e, const std::string& path) {
  auto s = string(e.value, path, e.line);
  if (!s) return std::nullopt;
  if (!text::is_token(*s)) {
    error(e.line, path, "invalid header name '" + *s + "': a header name is an HTTP token");
    return std::nullopt;
  }
  return s;
}

std::optional<rate> loader::rate_value(const entry& e, const std::string& path,
                                       std::string& text_out) {
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
      error(e.line, path,
            "rate " + *s + ": the period is longer than " + duration_text(max_period));
      return std::nullopt;
  }
  if (r.value.period > max_period) {
    error(e.line, path, "rate " + *s + ": the period is longer than " + duration_text(max_period));
    return std::nullopt;
  }
  if (r.value.count == 0)
    error(e.line, path, "rate " + *s + " never refills: the count must be at least 1");
  return r.value;
}

std::optional<rate> loader::calendar_rate_value(const entry& e, const std::string& path,
                                                std::string& text_out) {
  auto s = string(e.value, path, e.line);
  if (!s) return std::nullopt;
  text_out = *s;
  static const std::vector<std::string> units{"day", "week", "month"};
  const auto slash = s->find('/');
  const std::string unit = slash == std::string::npos ? std::string() : s->substr(slash + 1);
  const std::string count = slash == std::string::npos ? *s : s->substr(0, slash);
  const auto it = std::find(units.begin(), units.end(), unit);
  if (it == units.end()) {
    std::string why = "rate " + *s + ": a calendar quota counts per day, week or month " +
                      "(N/day, N/week or N/month)";
    if (slash == std::string::npos) {
      why = "invalid rate '" + *s + "': a calendar quota counts per day, week or month " +
            "(N/day, N/week or N/month)";
    } else if (auto sug = text::suggest(unit, units)) {
      why += "; did you mean " + count + "/" + *sug + "?";
    } else if (text::parse_duration(unit[0] >= '0' && unit[0] <= '9' ? unit : "1" + unit).error ==
               text::duration_error::none) {
      why += ", not a fixed duration such as " + unit + " (that is algorithm fixed_window)";
    }
    error(e.line, path, why);
    return std::nullopt;
  }
  // The count as any rate's count (N/1d reads it); its errors come before the period's, so
  // rate_value() on the text as written reports them in its words.
  static const std::int64_t days[] = {1, 7, 31};
  const auto n = static_cast<std::size_t>(it - units.begin());
  if (text::parse_rate(count + "/1d").error != text::rate_error::none) {
    (void)rate_value(e, path, text_out);
    return std::nullopt;
  }
  std::optional<rate> r = rate{};
  r->count = text::parse_rate(count + "/1d").value.count;
  r->period = std::chrono::milliseconds{days[n] * 86'400'000};
  if (r->count == 0)
    error(e.line, path, "rate " + *s + " never refills: the count must be at least 1");
  r->unit = static_cast<calendar_unit>(n + 1);
  return r;
}

std::optional<std::int32_t> loader::utc_offset(const entry& e, const std::string& path) {
  auto s = string(e.value, path, e.line);
  if (!s) return std::nullopt;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const std::string& t = *s;
  if (t.size() != 6 || (t[0] != '+' && t[0] != '-') || !digit(t[1]) || !digit(t[2]) ||
      t[3] != ':' || !digit(t[4]) || !digit(t[5])) {
    error(e.line, path,
          "invalid utc_offset '" + t + "': expected +HH:MM or -HH:MM, such as \"+05:30\" or " +
              "\"-08:00\"");
    return std::nullopt;
  }
  const int hours = (t[1] - '0') * 10 + (t[2] - '0');
  const int minutes = (t[4] - '0') * 10 + (t[5] - '0');
  if (minutes >= 60) {
    error(e.line, path, "invalid utc_offset '" + t + "': the minutes must be 00 .. 59");
    return std::nullopt;
  }
  const std::int32_t total = hours * 60 + minutes;
  if (total > 14 * 60) {
    error(e.line, path,
          "utc_offset " + t + " is outside -14:00 .. +14:00 (the offsets in use on Earth)");
    return std::nullopt;
  }
  return t[0] == '-' ? -total : total;
}

std::optional<std::int32_t> loader::warn_at(const entry& e, const std::string& path) {
  auto s = string(e.value, path, e.line);
  if (!s) return std::nullopt;
  const bool percent = !s->empty() && s->back() == '%';
  const std::string number = percent ? s->substr(0, s->size() - 1) : *s;
  // Digits with at most one '.', and at most 2 decimals of a percentage or 4 of a fraction,
  // so the threshold is a whole number of basis points (compared in integers).
  const auto dot = number.find('.');
  const std::size_t decimals = dot == std::string::npos ? 0 : number.size() - dot - 1;
  const bool digits_only =
      !number.empty() && number != "." &&
      std::all_of(number.begin(), number.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }) &&
      std::count(number.begin(), number.end(), '.') <= 1;
  if (!digits_only || decimals > (percent ? 2u : 4u) || number.size() > 12) {
    error(e.line, path,
          "invalid warn_at '" + *s + "': expected a percentage such as 80% (at most two " +
              "decimals) or a fraction such as 0.8 (at most four)");
    return std::nullopt;
  }
  // Basis points: the digits without the dot, scaled to 2 (percent) or 4 (fraction) decimals.
  std::string whole = number;
  if (dot != std::string::npos) whole.erase(dot, 1);
  std::int64_t bp = whole.empty() ? 0 : std::stoll(whole);
  for (std::size_t i = decimals; i < (percent ? 2u : 4u); ++i) bp *= 10;
  if (bp <= 0 || bp >= 10'000) {
    error(e.line, path,
          "warn_at " + *s + " is outside (0 %, 100 %): a warning threshold is a share of the " +
              "limit above 0 and below all of it");
    return std::nullopt;
  }
  return static_cast<std::int32_t>(bp);
}

std::optional<file_ref> loader::file_path(const entry& e, const std::string& path) {
  auto s = non_empty(e, path);
  if (!s) return std::nullopt;
  file_ref f{*s, path, e.line};
  const auto slash = file_.rfind('/');
  if (f.path.front() != '/' && slash != std::string::npos)
    f.path = file_.substr(0, slash + 1) + f.path;  // relative to the rules file
  return f;
}

std::optional<std::string> loader::env_name(const entry& e, const std::string& path) {
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

}  // namespace sluice::config::detail

namespace sluice::config {

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
    case algorithm::concurrency:
      return "concurrency";
    case algorithm::calendar:
      return "calendar";
  }
  return "?";
}

}  // namespace sluice::config
