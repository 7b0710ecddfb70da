// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the client-address parsers of src/identity/identity.cpp and the trusted-proxy
// walk over them — X-Forwarded-For entries in every form (parse_xff_entry), RFC 7239 nodes
// and `Forwarded` lines (parse_forwarded_node, parse_forwarded_line), locate_client() on
// both headers, client_key() of what it found — and the CIDR syntax of `trusted_proxies`.
//
// The input is header text: each line (split on LF) is one field line, given both as an
// X-Forwarded-For and as a Forwarded line, the way the parser hands them over (bytes a
// request head cannot carry in a value — CR, LF, NUL and other controls but HTAB — are
// dropped first). Each line and each of its comma-separated items also go through the
// single-entry parsers. Besides "no crash, no UB", the target checks the documented
// contracts: an address node holds a normalised address (never IPv4-mapped) that reads
// back as itself; a syntax error is the only node a failed line contributes; and the walk
// keys a request on a trusted address unless it names the peer or a real client.

#include "config/text.hpp"
#include "fuzz_check.hpp"
#include "sluice/identity/identity.hpp"

#include <boost/beast/http/fields.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace ip = boost::asio::ip;
using sluice::identity::forwarded_node;
using kind = sluice::identity::forwarded_node::kind;

sluice::config::cidr network(const char* text) {
  std::string why;
  auto c = sluice::config::text::parse_cidr(text, why);
  FUZZ_CHECK(c.has_value(), "a fixed trusted network parses");
  return *c;
}

struct fixture {
  sluice::config::identity_settings xff;
  sluice::config::identity_settings rfc7239;
  ip::address trusted_peer = ip::make_address("10.0.0.5");
  ip::address mapped_peer = ip::make_address("::ffff:10.0.0.5");
  ip::address v6_peer = ip::make_address("fd00::5");
  ip::address untrusted_peer = ip::make_address("203.0.113.9");

  fixture() {
    for (const char* n : {"10.0.0.0/8", "192.0.2.128/25", "fd00::/8", "2001:db8:ff::/48"}) {
      xff.trusted_proxies.push_back(network(n));
    }
    xff.ipv6_prefix = 64;
    xff.ipv4_prefix = 24;
    rfc7239 = xff;
    rfc7239.forwarded = sluice::config::forwarded_header::rfc7239;
  }
};

const fixture& fix() {
  static const fixture* f = new fixture();
  return *f;
}

// What a node of kind::address must satisfy: normalised, and its text reads back as itself.
void check_address_node(const forwarded_node& n, bool bracket_v6) {
  if (n.what != kind::address) return;
  const auto& a = n.address;
  FUZZ_CHECK(!(a.is_v6() && a.to_v6().is_v4_mapped()), "addresses are normalised");
  const std::string text = a.to_string();
  const std::string written = a.is_v6() && bracket_v6 ? "[" + text + "]" : text;
  const auto again = bracket_v6 ? sluice::identity::parse_forwarded_node(written)
                                : sluice::identity::parse_xff_entry(written);
  FUZZ_CHECK(again.what == kind::address && again.address == a,
             "an address's own text reads back as the same address");
}

void walk(const ip::address& peer, const boost::beast::http::fields& f,
          const sluice::config::identity_settings& s) {
  using src = sluice::identity::address_source;
  const auto got = sluice::identity::locate_client(peer, f, s);
  FUZZ_CHECK(!(got.address.is_v6() && got.address.to_v6().is_v4_mapped()),
             "the client address is normalised");
  const bool trusted = sluice::identity::is_trusted(got.address, s.trusted_proxies);
  switch (got.source) {
    case src::peer:
      FUZZ_CHECK(got.address == sluice::identity::normalise(peer), "source peer is the peer");
      FUZZ_CHECK(!trusted, "an untrusted peer is keyed itself");
      break;
    case src::forwarded:
      FUZZ_CHECK(!trusted, "a forwarded client is not a trusted proxy");
      break;
    default:
      // Every fallback keys the request on a trusted proxy's own address (and is counted).
      FUZZ_CHECK(trusted, "a fallback keys on a trusted address");
      break;
  }
  FUZZ_CHECK(sluice::identity::label(got.source) != "", "every source has a label");
  const std::string key = sluice::identity::client_key(got.address, s);
  FUZZ_CHECK(!key.empty(), "a client key is never empty");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fixture& fx = fix();
  std::string text;
  text.reserve(size);
  for (std::size_t i = 0; i < size; ++i) {
    const auto c = static_cast<unsigned char>(data[i]);
    if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f)) text += static_cast<char>(c);
  }

  boost::beast::http::fields xff_fields;
  boost::beast::http::fields forwarded_fields;
  std::string_view rest(text);
  while (true) {
    const auto nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);

    // The single-entry parsers: the whole line, and each comma-separated item.
    check_address_node(sluice::identity::parse_xff_entry(line), false);
    check_address_node(sluice::identity::parse_forwarded_node(line), true);
    std::string_view items = line;
    while (true) {
      const auto comma = items.find(',');
      check_address_node(sluice::identity::parse_xff_entry(items.substr(0, comma)), false);
      if (comma == std::string_view::npos) break;
      items.remove_prefix(comma + 1);
    }

    std::vector<forwarded_node> nodes{{kind::unknown, {}}};  // an earlier line's node stays
    const bool ok = sluice::identity::parse_forwarded_line(line, nodes);
    FUZZ_CHECK(nodes.size() >= 1 && nodes.front().what == kind::unknown,
               "a line never touches the nodes before it");
    if (!ok) {
      FUZZ_CHECK(nodes.size() == 2 && nodes.back().what == kind::syntax_error,
                 "a failed line contributes exactly one syntax_error node");
    }
    for (std::size_t i = 1; i < nodes.size(); ++i) {
      FUZZ_CHECK(ok || nodes[i].what == kind::syntax_error, "syntax errors come from failures");
      FUZZ_CHECK(!ok || nodes[i].what != kind::syntax_error, "a good line has no syntax error");
      check_address_node(nodes[i], true);
    }

    std::string why;
    if (auto c = sluice::config::text::parse_cidr(line, why)) {
      FUZZ_CHECK(c->prefix >= 0 && c->prefix <= (c->v6 ? 128 : 32), "a prefix fits its family");
    } else {
      FUZZ_CHECK(!why.empty(), "a refused network says why");
    }

    xff_fields.insert("X-Forwarded-For", line);
    forwarded_fields.insert("Forwarded", line);
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }

  for (const auto* peer : {&fx.trusted_peer, &fx.mapped_peer, &fx.v6_peer, &fx.untrusted_peer}) {
    walk(*peer, xff_fields, fx.xff);
    walk(*peer, forwarded_fields, fx.rfc7239);
    // Each setting reads its own header only: the other one's lines change nothing.
    const auto a = sluice::identity::locate_client(*peer, forwarded_fields, fx.xff);
    FUZZ_CHECK(a.source == sluice::identity::address_source::peer ||
                   a.source == sluice::identity::address_source::no_header,
               "x-forwarded-for mode ignores Forwarded");
  }
  return 0;
}
