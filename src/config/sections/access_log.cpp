// SPDX-License-Identifier: Apache-2.0
// The `access_log:` section: where the access log goes and in which format.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_access_log(const entry& e, rules& r) {
  static const std::vector<std::string> log_keys{"path", "format"};
  if (auto m = fields(e.value, "access_log", e.line, log_keys, true)) {
    if (const entry* p = m->find("path")) {
      if (auto text = string(p->value, "access_log.path", p->line)) {
        if (text->empty()) {
          error(p->line, "access_log.path", "path must not be empty (\"-\" is stdout)");
        } else {
          r.access_log_path = *text;
        }
      }
    } else {
      error(e.line, "access_log.path", "access_log needs a path (a file, or \"-\" for stdout)");
    }
    if (const entry* f = m->find("format")) {
      if (auto text = string(f->value, "access_log.format", f->line)) {
        if (*text == "json") {
          r.access_log_json = true;
        } else if (*text != "plain") {
          error(f->line, "access_log.format", "format must be plain or json, got " + *text);
        }
      }
    }
  }
}

}  // namespace sluice::config::detail
