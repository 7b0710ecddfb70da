// SPDX-License-Identifier: Apache-2.0
// The `client:` section: deadlines and caps for client connections (and the older
// top-level `client_timeout:`).

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_client(const entry* e, std::optional<std::chrono::milliseconds> legacy,
                          rules& r) {
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

}  // namespace sluice::config::detail
