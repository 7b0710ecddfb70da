// SPDX-License-Identifier: Apache-2.0
// Asio's SSL support is compiled once, here (BOOST_ASIO_SEPARATE_COMPILATION, as
// src/asio_beast.cpp does for the rest of Asio and Beast); it links OpenSSL.
#include <boost/asio/ssl/impl/src.hpp>
