// SPDX-License-Identifier: Apache-2.0
// The `tls:` section: TLS termination on the client listener. Only the shape is checked
// here (files named, choices known, no contradiction); the files themselves are read and
// checked by http::build_tls (src/http/tls_context.cpp), whose problems are diagnostics too.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_tls(const entry& e, rules& r) {
  static const std::vector<std::string> keys{"certificates", "client_ca", "verify_client",
                                             "key_passphrase_env", "key_passphrase_file"};
  auto m = fields(e.value, "tls", e.line, keys);
  if (!m) return;
  listener_tls& t = r.tls;
  t.enabled = true;
  t.line = e.line;

  if (const entry* c = m->find("certificates")) {
    const std::string path = "tls.certificates";
    if (sequence(c->value, path, c->line)) {
      static const std::vector<std::string> cert_keys{"cert", "key"};
      std::size_t i = 0;
      for (const auto& item : c->value) {
        const std::string p = at(path, i++);
        const int line = line_of(item, c->line);
        auto cm = fields(item, p, line, cert_keys);
        if (!cm) continue;
        tls_certificate tc;
        bool ok = true;
        for (const char* k : {"cert", "key"}) {
          const entry* f = cm->find(k);
          if (!f) {
            error(line, p, std::string("missing required key '") + k + "'");
            ok = false;
            continue;
          }
          auto ref = file_path(*f, join(p, k));
          if (!ref) {
            ok = false;
            continue;
          }
          (std::string_view(k) == "cert" ? tc.cert : tc.key) = *ref;
        }
        if (ok) t.certificates.push_back(std::move(tc));
      }
      if (i == 0) error(c->line, path, "needs at least one {cert: FILE, key: FILE}");
    }
  } else {
    error(e.line, "tls", "missing required key 'certificates' (a list of {cert: FILE, key: FILE})");
  }

  if (const entry* c = m->find("client_ca")) {
    if (auto f = file_path(*c, "tls.client_ca")) t.client_ca = *f;
  }
  // A client CA alone means client certificates are required.
  t.verify_client = t.client_ca.path.empty() ? client_verify::off : client_verify::require;
  if (const entry* v = m->find("verify_client")) {
    auto mode = choice<client_verify>(v->value, "tls.verify_client", v->line, "verify_client",
                                      {{"off", client_verify::off},
                                       {"optional", client_verify::optional},
                                       {"require", client_verify::require}});
    if (mode) {
      t.verify_client = *mode;
      if (*mode != client_verify::off && t.client_ca.path.empty() && !m->find("client_ca")) {
        error(v->line, "tls.verify_client",
              "verify_client needs client_ca (the CAs client certificates must chain to)");
      }
      if (*mode == client_verify::off && !t.client_ca.path.empty()) {
        error(v->line, "tls.verify_client", "client_ca is not used with verify_client: off");
      }
    }
  }

  const entry* env = m->find("key_passphrase_env");
  const entry* file = m->find("key_passphrase_file");
  if (env && file) {
    error(file->line, "tls.key_passphrase_file",
          "give key_passphrase_env or key_passphrase_file, not both");
  } else if (env) {
    if (auto name = env_name(*env, "tls.key_passphrase_env")) {
      t.key_passphrase_env = *name;
      t.key_passphrase_env_line = env->line;
    }
  } else if (file) {
    if (auto f = file_path(*file, "tls.key_passphrase_file")) t.key_passphrase_file = *f;
  }
}

}  // namespace sluice::config::detail
