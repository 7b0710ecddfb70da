// SPDX-License-Identifier: Apache-2.0
// redis_store's checks (redis_store_impl.hpp): queued in a turn of the loop and sent in
// batches of at most max_batch per script call; one deadline queue under one timer; the replies
// read into outcomes (check_batch.hpp), error replies classified and counted; the breaker.
#include "store/redis_store_impl.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

namespace sluice::store {

bool redis_store::impl::breaker_allows(bool& probe) {
  const auto before = breaker.state();
  const auto a = breaker.admit();
  mirror_breaker();
  if (before == breaker_state::open && breaker.state() == breaker_state::half_open) {
    ++counters.breaker_half_opens;
    spdlog::debug("redis {}:{}: breaker half-open, probing", settings.host, settings.port);
  }
  probe = a == circuit_breaker::admission::probe;
  return a != circuit_breaker::admission::refused;
}

void redis_store::impl::breaker_opened(verdict why, bool from_closed) {
  if (from_closed) {
    ++counters.breaker_opens;
    refused_while_open = 0;
    spdlog::warn(
        "redis {}:{}: breaker open after {} consecutive failed checks (last: {}); checks fail "
        "at once for {} ms, then a probe",
        settings.host, settings.port, breaker.consecutive_failures(), last_check_failure,
        settings.breaker_cool_down.count());
  } else {
    ++counters.breaker_reopens;
    spdlog::debug("redis {}:{}: probe failed ({}); breaker open again", settings.host,
                  settings.port, last_check_failure);
  }
  // A missed deadline means the peer stopped answering: replace the connection (see the top
  // of this file). Posted: we may be inside a connection callback or iterating `inflight`.
  if (why == verdict::timed_out && ac != nullptr) {
    asio::post(ex, [w = weak_from_this(), gen = generation] {
      auto self = w.lock();
      if (!self || self->generation != gen || self->ac == nullptr ||
          self->breaker.state() == breaker_state::closed) {
        return;
      }
      spdlog::debug("redis {}:{}: replacing the stalled connection", self->settings.host,
                    self->settings.port);
      self->drop_connection();
      self->backoff = backoff_first;
      self->schedule_reconnect();
    });
  }
}

void redis_store::impl::breaker_record(verdict v, bool probe) {
  if (v == verdict::not_sent) {
    if (probe) breaker.probe_not_sent();  // it never reached the server: probe again
    return;
  }
  const auto t = breaker.record(v == verdict::answered, probe);
  mirror_breaker();
  switch (t) {
    case circuit_breaker::transition::none:
      break;
    case circuit_breaker::transition::opened:
      breaker_opened(v, true);
      break;
    case circuit_breaker::transition::reopened:
      breaker_opened(v, false);
      break;
    case circuit_breaker::transition::closed:
      ++counters.breaker_closes;
      spdlog::info(
          "redis {}:{}: breaker closed, the store answers again (open {} ms, {} "
          "checks refused meanwhile)",
          settings.host, settings.port, breaker.open_for().count(), refused_while_open);
      break;
  }
}

void redis_store::impl::start_check(limiter::check_request req, check_handler handler,
                                    const routed_options& how,
                                    std::shared_ptr<std::string> error_text) {
  bool probe = false;
  if (state != conn_state::ready || ac == nullptr) {
    ++counters.unavailable;
    if (breaker.state() != breaker_state::closed) ++refused_while_open;
    finish(std::move(handler), errc::store_unavailable, {});
    return;
  }
  if (!breaker_allows(probe)) {
    ++counters.unavailable;
    ++refused_while_open;
    finish(std::move(handler), errc::store_unavailable, {});
    return;
  }
  const std::uint64_t id = next_id++;
  pending p;
  const std::size_t n = req.limits.size();
  // A check still queued (a stalled server) when its deadline has long passed must not run
  // when the server resumes: the request was answered without it.
  p.sent_ms = steady_ms();
  p.learns_clock = req.now_ms_override < 0;  // (a test's simulated time says nothing of it)
  if (clock_offset_ms && p.learns_clock) req.stale_after_ms = stale_bound(p.sent_ms);
  lua::append_check_command(req, settings.layout, p.args);  // numkeys, KEYS and ARGV
  p.shape.bursts.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = req.limits[i];
    p.shape.bursts.push_back(l.bucket.quota(l.algorithm));
    if (lua::packs_lease(l)) p.shape.leased.push_back(i);
    if (lua::packs_block(l)) p.shape.blocked.push_back(i);
  }
  p.handler = std::move(handler);
  p.probe = probe;
  p.asking = how.asking;
  p.batchable = !how.asking && p.learns_clock && n <= detail::max_batched_limits;
  p.error_text = std::move(error_text);
  auto it = inflight.emplace(id, std::move(p)).first;
  add_deadline(std::min(std::chrono::steady_clock::now() + settings.command_timeout, how.deadline),
               id);
  if (settings.max_batch > 1 && it->second.batchable) {
    // Sent with the other checks started in this turn of the loop, after it.
    queued.push_back(id);
    if (!flush_posted) {
      flush_posted = true;
      asio::post(ex, [w = weak_from_this()] {
        if (auto self = w.lock()) self->flush();
      });
    }
    return;
  }
  flush();  // (the checks queued before it go first: calls are answered in order)
  send_checks({&id, 1});
}

void redis_store::impl::flush() {
  flush_posted = false;
  std::vector<std::uint64_t> ids;
  ids.swap(queued);
  // (A cluster node's batch needs the function's allow-cross-slot-keys: none with EVALSHA.)
  const std::size_t most = settings.cluster_node && !use_functions ? 1 : settings.max_batch;
  for (std::size_t at = 0; at < ids.size(); at += most) {
    const std::size_t k = std::min(most, ids.size() - at);
    send_checks({ids.data() + at, k});
  }
}

void redis_store::impl::send_checks(std::span<const std::uint64_t> ids) {
  command c;
  std::vector<std::vector<std::string>*> parts;
  c.checks.reserve(ids.size());
  c.sizes.reserve(ids.size());
  parts.reserve(ids.size());
  for (const auto id : ids) {
    auto it = inflight.find(id);
    if (it == inflight.end()) continue;  // (completed meanwhile: a stop)
    if (c.checks.empty()) {
      c.sent_ms = it->second.sent_ms;
      c.learns_clock = it->second.learns_clock;
      c.asking = it->second.asking;
    }
    c.checks.push_back(id);
    c.sizes.push_back(it->second.shape.size());
    parts.push_back(&it->second.args);
  }
  if (c.checks.empty()) return;
  if (ac == nullptr || state != conn_state::ready) {
    for (const auto id : c.checks) {
      if (auto it = inflight.find(id); it != inflight.end()) {
        ++counters.unavailable;
        complete(it, errc::store_unavailable, {}, verdict::not_sent);
      }
    }
    return;
  }
  c.argv.reserve(2 + 1 + 5 * parts.size());
  c.argv.push_back(call_command);
  c.argv.push_back(call_target);
  c.stale_arg = detail::append_batch(parts, !settings.cluster_node, c.argv);
  ++counters.batch_sizes[batch_bucket(c.checks.size())];
  const std::uint64_t cid = next_id++;
  auto cit = commands.emplace(cid, std::move(c)).first;
  if (!send(cid, cit->second)) fail_command(cit, errc::store_unavailable, verdict::not_sent);
}

void redis_store::impl::fail_command(std::unordered_map<std::uint64_t, command>::iterator cit,
                                     error_code ec, verdict v) {
  const auto ids = std::move(cit->second.checks);
  commands.erase(cit);
  for (const auto id : ids) {
    if (auto it = inflight.find(id); it != inflight.end()) {
      if (ec == errc::store_unavailable) {
        ++counters.unavailable;
      } else {
        ++counters.errors;
      }
      complete(it, ec, {}, v);
    }
  }
}

bool redis_store::impl::send(std::uint64_t id, command& c) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(c.argv.size());
  lens.reserve(c.argv.size());
  for (const auto& a : c.argv) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  c.loads_at_send = loads_sent;
  // ASK: this one command goes to the importing node behind ASKING (the Redis Cluster
  // specification, "ASK redirection"); sent again before a re-sent check.
  if (c.asking && !ac->command(nullptr, nullptr, {"ASKING"})) return false;
  // The arguments are copied into the connection's output buffer here.
  return ac->command(&impl::on_check_reply, reinterpret_cast<void*>(id),
                     static_cast<int>(argv.size()), argv.data(), lens.data());
}

void redis_store::impl::add_deadline(std::chrono::steady_clock::time_point at, std::uint64_t id) {
  if (deadlines.empty() || deadlines.back().first <= at) {
    deadlines.emplace_back(at, id);
    if (!deadline_armed) arm_deadline();
    return;
  }
  const auto pos = std::upper_bound(deadlines.begin(), deadlines.end(), at,
                                    [](const auto& t, const auto& e) { return t < e.first; });
  const bool first = pos == deadlines.begin();
  deadlines.insert(pos, {at, id});
  if (first || !deadline_armed) arm_deadline();  // (expires_at cancels the earlier wait)
}

void redis_store::impl::arm_deadline() {
  while (!deadlines.empty() && !inflight.contains(deadlines.front().second) &&
         !reads.contains(deadlines.front().second)) {
    deadlines.pop_front();
  }
  if (deadlines.empty()) {
    deadline_armed = false;
    return;
  }
  deadline_armed = true;
  deadline_timer.expires_at(deadlines.front().first);
  deadline_timer.async_wait([w = weak_from_this()](error_code ec) {
    if (ec) return;
    if (auto self = w.lock()) self->deadlines_passed();
  });
}

void redis_store::impl::deadlines_passed() {
  const auto now = std::chrono::steady_clock::now();
  while (!deadlines.empty() && deadlines.front().first <= now) {
    const auto id = deadlines.front().second;
    deadlines.pop_front();
    on_deadline(id);  // (nothing when it was answered)
  }
  arm_deadline();
}

void redis_store::impl::on_deadline(std::uint64_t id) {
  if (auto r = reads.find(id); r != reads.end()) {
    ++counters.timeouts;
    complete_read(r, errc::store_timeout, std::nullopt, verdict::timed_out);
    return;
  }
  auto it = inflight.find(id);
  if (it == inflight.end()) return;
  ++counters.timeouts;
  if (error_log.admit()) {
    spdlog::warn("redis {}:{}: check missed its {} ms deadline", settings.host, settings.port,
                 settings.command_timeout.count());
  }
  last_check_failure =
      "missed the " + std::to_string(settings.command_timeout.count()) + " ms deadline";
  complete(it, errc::store_timeout, {}, verdict::timed_out);
}

void redis_store::impl::on_check_reply(detail::redis_connection* c, const redisReply* r,
                                       void* privdata) noexcept {
  try {
    impl* self = owner(c);
    if (self != nullptr) {
      self->handle_check_reply(reinterpret_cast<std::uintptr_t>(privdata), r);
    }
  } catch (...) {
    // No exception crosses a connection callback.
  }
}

void redis_store::impl::handle_check_reply(std::uint64_t cid, const redisReply* r) {
  auto cit = commands.find(cid);
  if (cit == commands.end()) return;  // (a stop forgot it)
  command& c = cit->second;
  if (r == nullptr) {  // the connection went away with the call in flight: no replay
    last_check_failure = "connection lost";
    fail_command(cit, errc::store_error, verdict::failed);
    return;
  }
  // Every check of the call timed out already: its answer is late.
  if (std::none_of(c.checks.begin(), c.checks.end(),
                   [&](std::uint64_t id) { return inflight.contains(id); })) {
    counters.late_replies += c.checks.size();  // dropped, never reused
    commands.erase(cit);
    return;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    call_failed(cit, r);
    return;
  }
  if (r->type != REDIS_REPLY_ARRAY) {
    malformed_reply(cit, 0, r->elements);
    return;
  }
  if (c.learns_clock && !c.stale_retried && r->elements >= 2 &&
      r->element[1]->type == REDIS_REPLY_INTEGER) {
    clock_offset_ms = r->element[1]->integer - c.sent_ms;  // the store time it decided at
  }
  // Each check's answer in turn, in the order they were sent.
  std::size_t at = 0;
  for (std::size_t k = 0; k < c.checks.size(); ++k) {
    const std::size_t available = at < r->elements ? r->elements - at : 0;
    auto it = inflight.find(c.checks[k]);
    if (it == inflight.end()) {
      // It missed its deadline meanwhile: its answer is late, skipped by its length.
      ++counters.late_replies;
      const bool refused = available > 0 && r->element[at]->type == REDIS_REPLY_INTEGER &&
                           r->element[at]->integer == -1;
      at += refused ? 2 : c.sizes[k];
      continue;
    }
    check_outcome out;
    std::size_t used = 0;
    const auto kind = detail::read_answer(r->element + at, available, it->second.shape, out, used);
    if (kind == detail::answer_kind::malformed ||
        (k + 1 == c.checks.size() && at + used != r->elements)) {
      malformed_reply(cit, k, r->elements);
      return;
    }
    at += used;
    if (kind == detail::answer_kind::refused) {
      ++counters.errors;
      ++counters.error_replies[static_cast<std::size_t>(error_kind::other)];
      if (error_log.admit()) {
        spdlog::warn(
            "redis {}:{}: the check script refused a check's arguments (in a batch of "
            "{})",
            settings.host, settings.port, c.checks.size());
      }
      complete(it, errc::store_error, {}, verdict::answered);
      continue;
    }
    ++counters.checks;
    wrong_node_streak = 0;
    if (logged_error) {
      spdlog::info("redis {}:{}: checks answered again (after {} replies)", settings.host,
                   settings.port, error_kind_name(*logged_error));
      logged_error.reset();
    }
    complete(it, {}, std::move(out), verdict::answered);
  }
  if (at != r->elements) {  // (the last check had missed its deadline)
    malformed_reply(cit, c.checks.size(), r->elements);
    return;
  }
  commands.erase(cit);
}

void redis_store::impl::malformed_reply(std::unordered_map<std::uint64_t, command>::iterator cit,
                                        std::size_t from, std::size_t elements) {
  const std::size_t size = cit->second.checks.size();
  if (error_log.admit()) {
    spdlog::warn("redis {}:{}: a reply of {} elements does not fit its call of {} check{}",
                 settings.host, settings.port, elements, size, size == 1 ? "" : "s");
  }
  for (std::size_t k = from; k < size; ++k) {
    if (auto it = inflight.find(cit->second.checks[k]); it != inflight.end()) {
      ++counters.errors;
      complete(it, errc::store_protocol, {}, verdict::answered);
    }
  }
  commands.erase(cit);
  if (size > 1 && ac != nullptr && state != conn_state::stopped) {
    drop_connection();  // the other calls in flight on it fail (NULL replies)
    schedule_reconnect();
  }
}

void redis_store::impl::call_failed(std::unordered_map<std::uint64_t, command>::iterator cit,
                                    const redisReply* r) {
  command& c = cit->second;
  const auto text = reply_text(r);
  const error_kind kind = classify_error_reply(text);
  if (settings.cluster_node && c.checks.size() > 1 &&
      text.find("non local key") != std::string_view::npos) {
    // A key of the batch is no longer served by this node (a slot moving): the script wrote
    // nothing (check_batch touches every check's key first). Each check goes again alone,
    // its keys declared, so the node answers MOVED or ASK for the ones that moved.
    spdlog::debug(
        "redis {}:{}: a batch of {} refused (a key no longer served here); sent "
        "again check by check",
        settings.host, settings.port, c.checks.size());
    const auto ids = std::move(c.checks);
    commands.erase(cit);
    for (const auto id : ids) {
      if (inflight.contains(id)) send_checks({&id, 1});
    }
    return;
  }
  count_error_reply(cit, kind, text);
  if (text.starts_with("STALE ")) {
    // The call is still in flight (a check's deadline has not passed), so it was timely:
    // only Redis's clock moving forward makes it stale. Learn the offset again from the time
    // the script saw and re-send it once under the new bound (the script wrote nothing).
    constexpr std::string_view mark = "now ";
    bool learned = false;
    if (const auto at = text.rfind(mark); at != std::string_view::npos) {
      std::int64_t now = 0;
      const auto digits = text.substr(at + mark.size());
      if (std::from_chars(digits.data(), digits.data() + digits.size(), now).ec == std::errc{}) {
        clock_offset_ms = now - c.sent_ms;
        learned = true;
      }
    }
    if (learned && !c.stale_retried && ac != nullptr && c.stale_arg < c.argv.size()) {
      c.stale_retried = true;
      counters.clock_resends += c.checks.size();
      c.argv[c.stale_arg] = std::to_string(stale_bound(c.sent_ms));
      if (clock_log.admit()) {
        spdlog::info(
            "redis {}:{}: the server's clock moved ({}); offset learned again, check re-sent",
            settings.host, settings.port, text);
      }
      if (send(cit->first, c)) return;
    }
    if (error_log.admit()) {
      spdlog::warn("redis {}:{}: check refused as stale by the server ({})", settings.host,
                   settings.port, text);
    }
    fail_command(cit, errc::store_error, verdict::answered);
    return;
  }
  if (kind == error_kind::noscript && !c.retried && ac != nullptr) {
    // The call did not run (NOSCRIPT, or "Function not found" after FUNCTION FLUSH): load
    // the check (unless a load was already sent after this call, which the pipeline orders
    // before the re-send) and re-send it once.
    c.retried = true;
    if (c.loads_at_send == loads_sent) send_script_load(tag_reload);
    if (send(cit->first, c)) return;
  }
  const verdict v = error_reply(kind, text);  // (counts one error, unless a redirection)
  const bool counted = kind != error_kind::moved && kind != error_kind::ask;
  const auto ids = std::move(c.checks);
  commands.erase(cit);
  bool first = true;
  for (const auto id : ids) {
    if (auto it = inflight.find(id); it != inflight.end()) {
      if (!first && counted) ++counters.errors;
      first = false;
      complete(it, errc::store_error, {}, v);
    }
  }
  if (is_wrong_node(kind)) wrong_node();
}

void redis_store::impl::count_error_reply(std::unordered_map<std::uint64_t, command>::iterator cit,
                                          error_kind kind, std::string_view text) {
  for (const auto id : cit->second.checks) {
    if (auto it = inflight.find(id); it != inflight.end()) {
      ++counters.error_replies[static_cast<std::size_t>(kind)];
      if (it->second.error_text) it->second.error_text->assign(text.substr(0, 200));
    }
  }
}

verdict redis_store::impl::error_reply(error_kind kind, std::string_view text) {
  // A cluster redirection is an answer, not a failure: the cluster store follows it.
  if (kind == error_kind::moved || kind == error_kind::ask) return verdict::answered;
  ++counters.errors;
  log_error_state(kind, text);
  if (!unhealthy_error(text)) return verdict::answered;
  last_check_failure = std::string(text.substr(0, 120));
  return verdict::failed;
}

void redis_store::impl::log_error_state(error_kind kind, std::string_view text) {
  if (logged_error == kind) return;
  logged_error = kind;
  spdlog::warn(
      "redis {}:{}: checks fail: {} (the routes' on_store_failure applies; repeats "
      "not logged)",
      settings.host, settings.port, text.substr(0, 200));
}

void redis_store::impl::wrong_node() {
  if (ac == nullptr || state == conn_state::stopped) return;  // already dropped (the breaker)
  ++counters.wrong_node_drops;
  drop_connection();  // the other checks in flight on it fail (NULL replies)
  // The first drop reconnects at once; while the address keeps leading to a node that
  // cannot serve (the failover is not over), the backoff grows (to 500 ms) as for any
  // failed attempt, and the reconnections are logged at debug level.
  if (++wrong_node_streak == 1) backoff = backoff_first;
  schedule_reconnect();
}

void redis_store::impl::complete(std::unordered_map<std::uint64_t, pending>::iterator it,
                                 error_code ec, check_outcome out, verdict v) {
  check_handler h = std::move(it->second.handler);
  const bool probe = it->second.probe;
  inflight.erase(it);  // its deadline entry is dropped when it reaches the queue's front
  finish(std::move(h), ec, std::move(out));
  breaker_record(v, probe);
}

void redis_store::impl::stop() {
  state = conn_state::stopped;
  backoff_timer.cancel();
  connect_timer.cancel();
  deadline_timer.cancel();
  deadlines.clear();
  deadline_armed = false;
  if (locator) locator->stop();
  locating = false;
  drop_connection();  // NULL replies complete the checks in flight with store_error
  commands.clear();
  queued.clear();
  while (!inflight.empty()) {
    ++counters.errors;
    complete(inflight.begin(), errc::store_unavailable, {}, verdict::not_sent);
  }
  while (!reads.empty()) {
    complete_read(reads.begin(), errc::store_unavailable, std::nullopt, verdict::not_sent);
  }
}

}  // namespace sluice::store
