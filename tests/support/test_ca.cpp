// SPDX-License-Identifier: Apache-2.0
#include "support/test_ca.hpp"

#include "support/child_process.hpp"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <stdexcept>

namespace sluice::test {
namespace {

const std::string openssl = "/usr/bin/openssl";

std::string fresh_name(const std::string& base) {
  static std::atomic<int> n{0};
  return base + "-" + std::to_string(n++);
}

}  // namespace

bool have_openssl() {
  return ::access(openssl.c_str(), X_OK) == 0;
}

std::string run_checked(const std::vector<std::string>& argv, const std::filesystem::path& dir) {
  const auto tag = fresh_name("run");
  child_process p(argv, dir / (tag + ".out"), dir / (tag + ".err"));
  const auto status = p.wait_exit(std::chrono::seconds(20));
  if (!status || *status != 0) {
    throw std::runtime_error(argv.front() + " " + (argv.size() > 1 ? argv[1] : "") +
                             " failed: " + p.err());
  }
  return p.out();
}

test_ca::test_ca(std::filesystem::path dir, std::string name)
    : dir_(std::move(dir)), name_(std::move(name)) {
  const auto base = fresh_name("ca");
  key_ = dir_ / (base + ".key");
  cert_ = dir_ / (base + ".pem");
  run_checked({openssl,
               "req",
               "-x509",
               "-newkey",
               "ec",
               "-pkeyopt",
               "ec_paramgen_curve:P-256",
               "-nodes",
               "-keyout",
               key_.string(),
               "-out",
               cert_.string(),
               "-days",
               "2",
               "-subj",
               "/CN=" + name_,
               "-addext",
               "basicConstraints=critical,CA:TRUE",
               "-addext",
               "keyUsage=critical,keyCertSign,cRLSign"},
              dir_);
}

issued test_ca::issue(const cert_request& r) const {
  const auto base = fresh_name(r.common_name);
  issued out{dir_ / (base + ".pem"), dir_ / (base + ".key")};
  const auto csr = dir_ / (base + ".csr");
  const auto ext = dir_ / (base + ".ext");
  std::string subject = "/CN=" + r.common_name;
  if (!r.organization.empty()) subject += "/O=" + r.organization;
  run_checked({openssl, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
               "-keyout", out.key.string(), "-out", csr.string(), "-subj", subject},
              dir_);
  {
    std::ofstream e(ext);
    e << "basicConstraints=CA:FALSE\n";
    e << "extendedKeyUsage=" << (r.client ? "clientAuth" : "serverAuth") << "\n";
    if (!r.alt_names.empty()) {
      e << "subjectAltName=";
      for (std::size_t i = 0; i < r.alt_names.size(); ++i) e << (i ? "," : "") << r.alt_names[i];
      e << "\n";
    }
  }
  // `-days -1`: notAfter a day before now, an expired certificate.
  run_checked({openssl, "x509", "-req", "-in", csr.string(), "-CA", cert_.string(), "-CAkey",
               key_.string(), "-CAcreateserial", "-out", out.cert.string(), "-days",
               r.expired ? "-1" : "1", "-extfile", ext.string()},
              dir_);
  return out;
}

void test_ca::encrypt_key(const std::filesystem::path& key, const std::string& passphrase,
                          const std::filesystem::path& out) {
  run_checked({openssl, "pkey", "-in", key.string(), "-aes256", "-passout", "pass:" + passphrase,
               "-out", out.string()},
              out.parent_path());
}

std::string test_ca::subject(const std::filesystem::path& cert) {
  auto text = run_checked({openssl, "x509", "-in", cert.string(), "-noout", "-subject"},
                          cert.parent_path());
  if (text.rfind("subject=", 0) == 0) text = text.substr(8);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace sluice::test
