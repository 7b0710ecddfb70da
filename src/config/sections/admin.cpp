// SPDX-License-Identifier: Apache-2.0
// The `admin:` field: the admin listener's address and, written as a mapping, the bearer token
// it asks for. The token is read here, with the rules file, so a missing variable or an exposed
// file refuses the load (a reload carrying one keeps the running rules and their token).

#include "config/loader_internal.hpp"

#include <cctype>
#include <cstdlib>

namespace sluice::config::detail {

namespace {

/// RFC 6750 §2.1 b64token: what a client can send after `Bearer ` as it is.
bool b64token(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' ||
                          s[i] == '.' || s[i] == '_' || s[i] == '~' || s[i] == '+' || s[i] == '/'))
    ++i;
  if (i == 0) return false;
  while (i < s.size() && s[i] == '=') ++i;
  return i == s.size();
}

}  // namespace

void loader::parse_admin(const entry& e, rules& r) {
  if (!e.value.IsMap()) {
    if (auto a = address(e, "admin", true)) {
      r.admin_host = a->host;
      r.admin_port = a->port;
    }
    return;
  }
  static const std::vector<std::string> keys{"listen", "token_env", "token_file", "metrics_open"};
  auto m = fields(e.value, "admin", e.line, keys);
  if (!m) return;
  if (const entry* l = m->find("listen")) {
    if (auto a = address(*l, "admin.listen", true)) {
      r.admin_host = a->host;
      r.admin_port = a->port;
    }
  } else {
    error(e.line, "admin", "missing required key 'listen' (the admin listener's host:port)");
  }

  admin_guard& g = r.admin;
  const entry* env = m->find("token_env");
  const entry* file = m->find("token_file");
  int token_line = 0;
  std::string token_path;
  if (env && file) {
    error(file->key_line, "admin.token_file",
          "token_env and token_file both give the token: keep one");
  } else if (env) {
    if (auto name = env_name(*env, "admin.token_env")) {
      const char* v = std::getenv(name->c_str());
      if (v == nullptr) {
        error(env->line, "admin.token_env", "the environment variable " + *name + " is not set");
      } else if (*v == '\0') {
        error(env->line, "admin.token_env", "the environment variable " + *name + " is empty");
      } else {
        g.token_env = *name;
        g.token = v;
        token_line = env->line;
        token_path = "admin.token_env";
      }
    }
  } else if (file) {
    password_file(*file, "admin.token_file", g.token_file, g.token, "token");
    token_line = file->line;
    token_path = "admin.token_file";
  }
  // The token itself is never echoed: diagnostics reach logs and the admin endpoints.
  if (!g.token.empty() && !b64token(g.token)) {
    error(token_line, token_path,
          "the token has characters a client cannot send after 'Bearer ' (RFC 6750 b64token: "
          "letters, digits, - . _ ~ + /, then = padding)");
    g.token.clear();
  }

  if (const entry* o = m->find("metrics_open")) {
    if (auto b = boolean(*o, "admin.metrics_open")) {
      if (*b && !env && !file)
        error(o->line, "admin.metrics_open",
              "applies only with token_env or token_file (without a token every path is open)");
      g.metrics_open = *b;
    }
  }
}

}  // namespace sluice::config::detail
