// SPDX-License-Identifier: Apache-2.0
// The `store:` section: memory, redis, redis-sentinel and redis-cluster, with their fields.

#include "config/file.hpp"
#include "config/loader_internal.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace sluice::config::detail {

void loader::parse_store(const entry& e, rules& r) {
  static const std::vector<std::string> keys{"type",
                                             "address",
                                             "nodes",
                                             "timeout",
                                             "password_env",
                                             "password_file",
                                             "username",
                                             "tls",
                                             "local_share",
                                             "region_share",
                                             "layout",
                                             "hash_groups",
                                             "max_buckets",
                                             "over_limit_cache",
                                             "max_batch",
                                             "sentinels",
                                             "master",
                                             "sentinel_password_env",
                                             "sentinel_password_file",
                                             "sentinel_username",
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
  if (const entry* p = m->find("password_file")) {
    if (m->find("password_env"))
      error(p->key_line, "store.password_file",
            "password_env and password_file both give the password: keep one");
    else
      password_file(*p, "store.password_file", r.store.password_file, r.store.password);
  }
  if (const entry* u = m->find("username")) {
    if (auto s = non_empty(*u, "store.username")) r.store.username = *s;
  }
  if (const entry* t = m->find("tls")) parse_store_tls(*t, r);
  if (const entry* ls = m->find("local_share")) {
    if (auto v = share(*ls, "store.local_share", "local_share")) r.store.local_share = *v;
  }
  if (const entry* rs = m->find("region_share")) {
    if (auto v = share(*rs, "store.region_share", "region_share")) {
      r.store.region_share = *v;
      region_share_ = *v;
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
  if (const entry* b = m->find("max_batch")) {
    if (auto v = integer(*b, "store.max_batch", "max_batch", 1, 1024))
      r.store.max_batch = static_cast<std::uint32_t>(*v);
  }
  if (const entry* c = m->find("over_limit_cache")) {
    if (auto v = boolean(*c, "store.over_limit_cache")) r.store.over_limit_cache = *v;
  }
}

void loader::parse_cluster_fields(const entry& e, const map_view& m, rules& r) {
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

void loader::parse_sentinel_fields(const entry& e, const map_view& m, rules& r) {
  const bool sentinel = r.store.type == store_settings::kind::redis_sentinel;
  for (const char* key : {"sentinels", "master", "sentinel_password_env", "sentinel_password_file",
                          "sentinel_username", "sentinel_timeout"}) {
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
        error(
            n->line, "store.master",
            "invalid master name '" + *s + "': expected the name the Sentinels monitor (one word)");
    }
  } else {
    error(e.line, "store.master",
          "type redis-sentinel needs master: the name the Sentinels monitor the master under");
  }
  if (const entry* p = m.find("sentinel_password_env")) {
    if (auto s = env_name(*p, "store.sentinel_password_env")) r.store.sentinel_password_env = *s;
  }
  if (const entry* p = m.find("sentinel_password_file")) {
    if (m.find("sentinel_password_env"))
      error(p->key_line, "store.sentinel_password_file",
            "sentinel_password_env and sentinel_password_file both give the Sentinels' "
            "password: keep one");
    else
      password_file(*p, "store.sentinel_password_file", r.store.sentinel_password_file,
                    r.store.sentinel_password);
  }
  if (const entry* u = m.find("sentinel_username")) {
    if (auto s = non_empty(*u, "store.sentinel_username")) r.store.sentinel_username = *s;
  }
  if (const entry* t = m.find("sentinel_timeout")) {
    if (auto d =
            duration(*t, "store.sentinel_timeout", "sentinel_timeout", std::chrono::seconds{10}))
      r.store.sentinel_timeout = *d;
  }
}

// `store.tls`: TLS towards every Redis connection of the store (Redis 6+ `tls-port`). The
// files are read when the store is made (store::make_redis_tls_context), at start.
void loader::parse_store_tls(const entry& e, rules& r) {
  static const std::vector<std::string> keys{"enabled", "ca_file",   "server_name",
                                             "verify",  "cert_file", "key_file"};
  if (!r.store.redis()) {
    error(e.key_line, "store.tls", "applies only to the Redis store types");
    return;
  }
  auto m = fields(e.value, "store.tls", e.line, keys, true);
  if (!m) return;
  auto& t = r.store.tls;
  t.enabled = true;
  // A file that cannot be read is this file's mistake, at its line (the certificates' content
  // is checked when the store is made).
  const auto readable = [&](const entry& x, const std::string& path) -> std::optional<std::string> {
    auto f = file_path(x, path);
    if (!f) return std::nullopt;
    if (std::ifstream in(f->path); !in) {
      error(x.line, path, "cannot read file '" + f->path + "': " + std::strerror(errno));
      return std::nullopt;
    }
    return f->path;
  };
  if (const entry* x = m->find("enabled")) {
    if (auto v = boolean(*x, "store.tls.enabled")) t.enabled = *v;
  }
  if (const entry* x = m->find("ca_file")) {
    if (auto f = readable(*x, "store.tls.ca_file")) t.ca_file = *f;
  }
  if (const entry* x = m->find("server_name")) {
    if (auto s = non_empty(*x, "store.tls.server_name")) t.server_name = *s;
  }
  if (const entry* x = m->find("verify")) {
    if (auto v = boolean(*x, "store.tls.verify")) t.verify = *v;
  }
  const entry* cert = m->find("cert_file");
  const entry* key = m->find("key_file");
  if (cert) {
    if (auto f = readable(*cert, "store.tls.cert_file")) t.cert_file = *f;
  }
  if (key) {
    if (auto f = readable(*key, "store.tls.key_file")) t.key_file = *f;
  }
  if (cert && !key)
    error(cert->key_line, "store.tls.key_file", "cert_file needs key_file (its private key)");
  if (key && !cert)
    error(key->key_line, "store.tls.cert_file", "key_file needs cert_file (its certificate)");
}

void loader::password_file(const entry& e, const std::string& path, std::string& file_out,
                           std::string& password_out, std::string_view noun) {
  const std::string what = std::string(noun) + " file '";
  auto s = non_empty(e, path);
  if (!s) return;
  std::string file = *s;
  const auto slash = file_.rfind('/');
  if (file.front() != '/' && slash != std::string::npos)
    file = file_.substr(0, slash + 1) + file;  // relative to the rules file, as api_keys_file
  std::string content;
  // A password is short; the bound only keeps a wrong path (a log file) from being read.
  if (std::string why = file::read_private(file, 64 * 1024, content); !why.empty()) {
    error(e.line, path, what + file + "': " + why);
    return;
  }
  // One trailing newline is what `echo` and editors leave; it is not part of the password.
  if (!content.empty() && content.back() == '\n') content.pop_back();
  if (!content.empty() && content.back() == '\r') content.pop_back();
  // The password itself is never echoed: diagnostics reach logs and the admin endpoints.
  if (content.empty()) {
    error(e.line, path, what + file + "': the file is empty");
  } else if (content.find_first_of(std::string_view("\n\r\0", 3)) != std::string::npos) {
    error(e.line, path,
          what + file + "': more than one line (or a NUL): write the " + std::string(noun) + " " +
              "alone");
  } else {
    file_out = std::move(file);
    password_out = std::move(content);
  }
}

}  // namespace sluice::config::detail
