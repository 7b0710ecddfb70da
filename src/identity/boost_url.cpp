// SPDX-License-Identifier: Apache-2.0
// Boost.URL is not header-only: its out-of-line functions (make_pct_string_view,
// pct_string_view::decode, ...) are compiled here, once, as Asio and Beast are in
// src/asio_beast.cpp. The identity room uses it to percent-decode the API key query parameter;
// the admin listener (which links sluice_identity) to read the explain query.
// A room that needs Boost.URL without linking sluice_identity should move this file into
// sluice_base (or link Boost::url) rather than include src.hpp a second time.
#include <boost/url/src.hpp>
