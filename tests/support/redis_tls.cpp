// SPDX-License-Identifier: Apache-2.0
#include "support/redis_tls.hpp"

namespace sluice::test {

redis_tls_material::redis_tls_material(const std::filesystem::path& dir)
    : ca(dir, "sluice redis test CA"),
      server(ca.issue(cert_request("localhost").names({"DNS:localhost", "IP:127.0.0.1"}))),
      client(ca.issue(cert_request("sluice-gateway").for_client())) {}

std::vector<std::string> redis_tls_material::server_args(std::uint16_t tls_port,
                                                         bool require_client_certs) const {
  return {"--tls-port", std::to_string(tls_port), "--tls-cert-file", server.cert.string(),
          "--tls-key-file", server.key.string(), "--tls-ca-cert-file", ca.cert().string(),
          // What the server presents when it connects out (replication, the Sentinels'
          // links, the cluster bus): the client certificate, which a peer requiring one takes.
          "--tls-client-cert-file", client.cert.string(), "--tls-client-key-file",
          client.key.string(), "--tls-auth-clients", require_client_certs ? "yes" : "no"};
}

std::string sluice_acl_rule(const std::string& password) {
  return "on >" + password +
         " resetkeys ~sl:* %R~sluice:api_keys resetchannels -@all"
         " +fcall +function|load +evalsha +script|load +ping +role +hget +asking"
         " +cluster|shards +cluster|slots"
         " +time +exists +get +set +del +hget +hset +hdel +hrandfield +pexpire +pttl"
         " +rpush +lrange +ltrim +zadd +zrem +zrangebyscore +zremrangebyscore";
}

std::vector<std::string> acl_args(const std::string& user, const std::string& password) {
  // redis-server takes each word after `--user` as one argument of the directive.
  std::vector<std::string> out{"--user", user};
  const std::string rule = sluice_acl_rule(password);
  std::size_t at = 0;
  while (at < rule.size()) {
    const auto sp = rule.find(' ', at);
    out.push_back(rule.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
    at = sp == std::string::npos ? rule.size() : sp + 1;
  }
  return out;
}

}  // namespace sluice::test
