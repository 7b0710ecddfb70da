// SPDX-License-Identifier: Apache-2.0
// Boost.JSON compiled once, here (header-only mode would compile it in every user).
#include <boost/json/src.hpp>
