// SPDX-License-Identifier: Apache-2.0
// `GET /admin/explain` (issue 13, "why was I limited?"): the request path's own steps — route
// → identify → the limits that apply — run on a request described by the query, then every
// limit decided by the store with check_request::peek set, so the answer is exactly what a
// request would get now and nothing is spent. Runs on a worker's executor (the worker owns its
// store connection), called through gateway::explain().
#include "request_path.hpp"

#include "sluice/limiter/calendar.hpp"
#include "sluice/limiter/guarantee.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/limiter/slot_book.hpp"
#include "sluice/observability/admin.hpp"
#include "sluice/store/cluster_slots.hpp"
#include "sluice/utf8.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

namespace sluice::app {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace json = boost::json;

namespace {

/// The answer's text. Its strings echo the query (path, header values, bucket keys made of
/// them) byte for byte: an ill-formed UTF-8 byte becomes U+FFFD so the body stays JSON
/// (RFC 8259 §8.1). Bytes above 0x7F occur only inside strings, so repairing the text is
/// repairing those strings.
std::string serialized(const json::object& out) {
  return utf8::make_valid(json::serialize(out));
}

/// A verdict the request path made before any limit (404, 401, 400...) or an unlimited
/// forward, as the explanation's decision.
json::object verdict_json(const http::verdict& v) {
  json::object o;
  if (v.what == http::verdict::kind::forward) {
    o["decision"] = "forward";
    o["status"] = "the upstream's";
  } else {
    o["decision"] = "answer";
    o["status"] = static_cast<unsigned>(v.answer.result_int());
    if (!v.answer.body().empty()) o["body"] = v.answer.body();
  }
  return o;
}

const char* namespace_text(identity::caller const& who) {
  return who.anonymous ? "anonymous" : "api_key";
}

}  // namespace

asio::awaitable<std::string> gateway_handler::explain(observability::explain_query q) {
  const std::shared_ptr<const snapshot> snap = shared_.current.load();
  const config::rules& rules = *snap->rules;
  json::object out;
  out["generation"] = snap->generation;
  json::object request;
  request["method"] = q.method;
  request["path"] = q.path;
  request["ip"] = q.ip.empty() ? std::string("127.0.0.1") : q.ip;
  out["request"] = std::move(request);

  // The request as a client would send it.
  http::request_head head;
  const auto verb = bhttp::string_to_verb(q.method);
  if (verb == bhttp::verb::unknown) {
    out["error"] = "unknown method '" + q.method + "'";
    co_return serialized(out);
  }
  head.method(verb);
  head.target(q.path);
  head.version(11);
  bool host = false;
  for (const auto& [name, value] : q.headers) {
    head.insert(name, value);
    host = host || beast::iequals(name, "host");
  }
  if (!host) head.set(bhttp::field::host, "localhost");
  if (!q.api_key.empty()) {
    if (!rules.identity.api_key_header.empty()) {
      head.set(rules.identity.api_key_header, q.api_key);
    } else if (!rules.identity.api_key_query.empty()) {
      // Only a query parameter carries keys: one more parameter, percent-encoded.
      std::string target(q.path);
      target += target.find('?') == std::string::npos ? '?' : '&';
      target += rules.identity.api_key_query + '=' +
                boost::urls::encode(q.api_key, boost::urls::unreserved_chars);
      head.target(target);
    }
  }
  http::request_context ctx;
  // Described as an HTTP/2 request: the protocol every route takes (a route whose upstream
  // speaks HTTP/2 refuses HTTP/1.1 before any limit).
  ctx.proto = http::protocol::h2;
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(q.ip.empty() ? "127.0.0.1" : q.ip, ec);
  if (ec) {
    out["error"] = "ip '" + q.ip + "' is not an IP address";
    co_return serialized(out);
  }
  ctx.peer = {ip, 0};
  ctx.peer_text = ip.is_v6() && ip.to_v6().is_v4_mapped()
                      ? asio::ip::make_address_v4(asio::ip::v4_mapped, ip.to_v6()).to_string()
                      : ip.to_string();

  // route, then identify (the directory is read, never written): decide()'s own steps
  pending s;
  std::optional<http::verdict> early = front(*snap, head, ctx, s);
  if (!s.r) {
    out["route"] = nullptr;
    out["outcome"] = verdict_json(*early);
    co_return serialized(out);
  }
  const routed& r = *s.r;
  const config::route& rt = *r.route->route;
  out["route"] = rt.name;
  out["cost"] = rt.cost;
  out["on_store_failure"] = rt.on_store_failure == config::failure_policy::fail_open ? "fail_open"
                            : rt.on_store_failure == config::failure_policy::fail_closed
                                ? "fail_closed"
                                : "local";
  if (!early && needs_directory(*snap, r, s.p)) co_await look_up_plan(*snap, s.p);
  if (!early) early = identify_caller(*snap, head, r, s.p, s.id);
  if (early) {
    out["outcome"] = verdict_json(*early);
    co_return serialized(out);
  }
  const identified& id = s.id;
  json::object caller;
  caller["identity"] = namespace_text(id.who);
  caller["plan"] = id.who.plan;
  caller["client_ip"] = id.who.client_ip;
  if (r.preflight) caller["preflight"] = true;
  out["caller"] = std::move(caller);

  // the limits that apply, decided by the store as if (peek)
  const auto& prepared = *id.limits;
  json::array limits;
  if (prepared.limits.empty()) {
    out["limits"] = std::move(limits);
    json::object o;
    o["decision"] = "unlimited";
    out["outcome"] = std::move(o);
    co_return serialized(out);
  }
  if (id.directory_down) {
    out["limits"] = std::move(limits);
    json::object o;
    o["decision"] = "store unavailable: the route's failure policy applies";
    out["outcome"] = std::move(o);
    co_return serialized(out);
  }
  limiter::check_request& check = s.check;  // (s.charged: explain settles nothing)
  if (auto v = prepare_check(*snap, head, ctx, r, id, check, s.charged)) {
    out["outcome"] = verdict_json(*v);
    co_return serialized(out);
  }
  // A concurrency limit is asked as a new request would be: with a slot id no request holds.
  if (prepared.concurrent) limiter::slot_book::stamp(check, "explain");
  // The store step as if: nothing is written or spent, no lease or cached refusal is used.
  const store_result decided = co_await store_.peek(check);
  for (std::size_t i = 0; i < check.limits.size(); ++i) {
    const config::limit& l = *prepared.limits[i];
    json::object o = observability::limit_json(l);
    o["bucket"] = check.limits[i].key;
    if (rules.store.type != config::store_settings::kind::memory) {
      // Where Redis holds it: the key (a group hash's in the hash layout, with the bucket's
      // field) and that key's cluster hash slot (`CLUSTER KEYSLOT`): which master has it.
      const lua::key_layout layout = key_layout_of(rules.store);
      const std::string key = lua::redis_key(check.limits[i], layout);
      json::object where;
      where["key"] = key;
      if (key != check.limits[i].key)
        where["field"] = limiter::packed_address(check.limits[i].key, layout.hash_groups).field;
      where["slot"] = store::key_hash_slot(key);
      o["redis"] = std::move(where);
    }
    o["stated_guarantee"] = limiter::guarantee(l.algorithm, *l.find_params(id.who.plan)) +
                            limiter::hot_key_caveats(l, *l.find_params(id.who.plan)) +
                            limiter::charge_caveat(l) + limiter::block_caveat(l) +
                            limiter::cluster_caveat(l);
    if (decided) {
      const auto& lo = decided->limits[i];
      json::object state;
      state["admits"] = lo.admits;
      state["limit"] = lo.limit;
      state["remaining"] = lo.remaining;  // after this request, as its headers would say
      state["reset_ms"] = lo.reset_ms;
      state["retry_after_ms"] = lo.retry_after_ms;
      state["next_ms"] = lo.next_ms;
      if (l.algorithm == config::algorithm::concurrency) {
        // Requests of the key in flight now: Remaining counts the slot this request would
        // take (when the decision admits it), which no request holds yet.
        const bool would_take = check.limits[i].shadow ? lo.admits : decided->allowed;
        state["in_flight"] =
            std::max<std::int64_t>(0, lo.limit - lo.remaining - (would_take ? 1 : 0));
      }
      if (lo.block_end_ms > 0) {
        // The penalty box: a block in force (read, not written: the peek starts none), or
        // the one this request would start.
        json::object block;
        block["ends_at_ms"] = lo.block_end_ms;  // store time
        block["seconds_left"] =
            limiter::ceil_div(std::max<std::int64_t>(0, lo.block_end_ms - decided->now_ms), 1000);
        block["state"] = lo.block == limiter::limit_outcome::block_event::started
                             ? "would start with this request"
                             : "in force";
        state["block"] = std::move(block);
      }
      if (l.charge.what != config::charge_rule::kind::none) {
        // Reservations outstanding: units this gateway's admitted requests took and have not
        // settled yet (other gateways sharing the store hold their own).
        const reservation_ledger::entry e = shared_.reservations->at(check.limits[i].key);
        json::object res;
        res["requests"] = e.requests;
        res["units"] = e.units;
        res["scope"] = "this gateway";
        state["reservations_outstanding"] = std::move(res);
      }
      const limiter::applied_limit& al = prepared.applied[i];
      if (al.warn_at_bp > 0) state["past_warn_at"] = limiter::past_warning(al, lo);
      if (al.algorithm == config::algorithm::calendar && decided->now_ms > 0) {
        // The quota's period: it resets at period_end (the store's clock, the limit's zone).
        const auto& b = al.bucket;
        const auto period =
            limiter::calendar_period_at(b.calendar, b.utc_offset_minutes, decided->now_ms);
        state["period_start_ms"] = period.start_ms;
        state["period_end_ms"] = period.end_ms;
        state["period_start"] = limiter::local_time_text(period.start_ms, b.utc_offset_minutes);
        state["period_end"] = limiter::local_time_text(period.end_ms, b.utc_offset_minutes);
      }
      o["now"] = std::move(state);
    }
    limits.emplace_back(std::move(o));
  }
  out["limits"] = std::move(limits);
  json::object o;
  if (!decided) {
    o["decision"] = "store unavailable: the route's failure policy applies";
    o["error"] = decided.error().message();
  } else {
    const outcome_summary sum = summarize(*decided, prepared.applied);
    o["decision"] = sum.decision;
    if (!decided->allowed) {
      o["status"] = 429;
      if (sum.deciding < prepared.limits.size())
        o["limit"] = prepared.limits[sum.deciding]->name;  // frees up last
      o["retry_after_ms"] = sum.retry_after_ms;
    } else if (sum.deciding < prepared.limits.size()) {
      o["limit"] = prepared.limits[sum.deciding]->name;  // the shadow limit that would refuse
    }
    o["store_time_ms"] = decided->now_ms;
  }
  out["outcome"] = std::move(o);
  co_return serialized(out);
}

}  // namespace sluice::app
