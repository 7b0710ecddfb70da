// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Shared inputs of the micro-benchmarks: one realistic rules snapshot (20 routes, plans,
/// trusted proxies, an API key query parameter) and request builders.

#include "sluice/config/loader.hpp"
#include "sluice/config/rules.hpp"
#include "sluice/http/types.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace sluice::micro {

/// The benchmark rules file: 20 routes mixing prefix, exact and glob paths, method lists and
/// host conditions, ending with a catch-all; two plans; limits by api_key, ip, user and header.
inline constexpr std::string_view rules_yaml = R"(
listen: 127.0.0.1:0
workers: 1
store: {type: memory}
headers: [x-ratelimit, ietf]
upstreams: {api: {url: "http://127.0.0.1:9"}, admin: {url: "http://127.0.0.1:9/base"}}
identity:
  api_key: {header: X-API-Key, query: api_key}
  user: {header: X-User}
  trusted_proxies: [10.0.0.0/8, 192.168.0.0/16, "fd00::/8"]
  unknown_key: anonymous
plans:
  free: {limits: [{name: free_minute, rate: 100/1m, burst: 100}]}
  pro:
    limits:
      - {name: pro_second, rate: 50/1s, burst: 100}
      - {name: pro_day, rate: 1000000/1d, burst: 1000000}
api_keys: {key-a: free, key-p: pro, key-b: free}
routes:
  - {name: health, match: {path: /healthz, methods: [GET]}, upstream: api}
  - {name: login, match: {path: /login, methods: [POST]}, upstream: api,
     on_store_failure: fail_closed, limits: [{name: login_ip, by: ip, rate: 5/1m}]}
  - {name: logout, match: {path: /logout, methods: [POST]}, upstream: api}
  - {name: admin, match: {path_prefix: /admin/, host: admin.example.test}, upstream: admin}
  - {name: users_me, match: {path: /v1/users/me, methods: [GET, PATCH]}, upstream: api,
     limits: [{name: users_me_user, by: user, rate: 60/1m}]}
  - {name: user_item, match: {path_glob: "/v1/users/*/items/*", methods: [GET]}, upstream: api}
  - {name: user_any, match: {path_glob: "/v1/users/**", methods: [GET, PUT, DELETE]}, upstream: api}
  - {name: search_post, match: {path_prefix: /v1/search, methods: [POST]}, upstream: api, cost: 2}
  - {name: search, match: {path_prefix: /v1/search, methods: [GET]}, upstream: api,
     limits: [{name: search_key, by: api_key, rate: 10/1m, burst: 10,
               plans: {pro: {rate: 100/1m, burst: 200}}}]}
  - {name: orders_create, match: {path: /v1/orders, methods: [POST]}, upstream: api,
     limits: [{name: orders_tenant, by: "header:X-Tenant", rate: 20/1s}]}
  - {name: order, match: {path_glob: "/v1/orders/*", methods: [GET, DELETE]}, upstream: api}
  - {name: order_lines, match: {path_glob: "/v1/orders/*/lines/**"}, upstream: api}
  - {name: reports, match: {path_prefix: /v1/reports/, methods: [GET]}, upstream: api,
     limits: [{name: reports_window, by: api_key, algorithm: fixed_window, rate: 100/1m}]}
  - {name: exports, match: {path_prefix: /v1/exports/, methods: [GET, POST]}, upstream: api,
     limits: [{name: exports_sliding, by: api_key, algorithm: sliding_window, rate: 10/1h}]}
  - {name: webhooks, match: {path_glob: "/v1/hooks/*/deliveries", methods: [POST]}, upstream: api}
  - {name: tenant_api, match: {path_prefix: /v2/, host: tenant.example.test}, upstream: api}
  - {name: files, match: {path_prefix: /files/, methods: [GET, PUT]}, upstream: api}
  - {name: static, match: {path_glob: "/static/**", methods: [GET]}, upstream: api}
  - {name: items, match: {path_prefix: /v1/items}, upstream: api,
     limits: [{name: items_key, by: api_key, rate: 1000/1s, burst: 1000},
              {name: items_ip, by: ip, rate: 1000/1s, burst: 1000},
              {name: items_global, by: global, rate: 100000/1s, burst: 100000}]}
  - {name: default, match: {path_prefix: /}, upstream: api,
     limits: [{name: default_ip, by: ip, rate: 100/1s}]}
)";

/// The benchmark snapshot, loaded once (aborts with the diagnostics if it does not load).
const config::rules& bench_rules();

/// A GET-style request with the given method, target and Host, HTTP/1.1, empty body.
http::request make_request(boost::beast::http::verb method, std::string_view target,
                           std::string_view host = "api.example.test");

/// An IP address from text (aborts on malformed text: benchmark inputs are constants).
boost::asio::ip::address address(std::string_view text);

/// The named route of bench_rules() (aborts when absent).
const config::route& route_named(std::string_view name);

}  // namespace sluice::micro
