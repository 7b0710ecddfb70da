// SPDX-License-Identifier: Apache-2.0
// Asio and Beast are compiled once, here (BOOST_ASIO_SEPARATE_COMPILATION and
// BOOST_BEAST_SEPARATE_COMPILATION are set on sluice_core): it halves build time.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
