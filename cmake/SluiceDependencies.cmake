# SPDX-License-Identifier: Apache-2.0
# Dependency lookup. Everything comes from Debian packages (scripts/setup installs them);
# no FetchContent: the build never downloads.
find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED COMPONENTS program_options)
find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)
# prometheus-cpp core only (metric families and the text serializer); the admin listener serves
# /metrics itself, so the pull library's civetweb server is not used. Debian's config package
# also looks up the pull and push libraries' dependencies (civetweb, zlib, curl), which
# prometheus-cpp-dev installs.
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(PkgConfig REQUIRED)
# Debian's hiredis CMake package has no usable target: use pkg-config.
pkg_check_modules(hiredis REQUIRED IMPORTED_TARGET hiredis)
# The Envoy rate limit service (src/rls/): protobuf and gRPC C++ (libprotobuf-dev,
# protobuf-compiler, libgrpc++-dev, protobuf-compiler-grpc). Debian's gRPC CMake package is
# incomplete, so grpc++ comes through pkg-config and the plugin is found as a program.
find_package(Protobuf REQUIRED)
pkg_check_modules(grpcpp REQUIRED IMPORTED_TARGET grpc++)
find_program(SLUICE_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
# The gateway's allocator: tcmalloc (gperftools, the minimal build without the profiler), as
# Envoy links it. A request makes about 30 small allocations (Beast's field nodes, coroutine
# frames, strings); tcmalloc's per-thread caches serve them in a fraction of glibc malloc's
# instructions (bench/RESULTS.md, "Where the CPU goes"). Only the `sluice` executable links it:
# not the libraries, tests or fuzz targets, and never with a sanitizer (they bring their own).
option(SLUICE_TCMALLOC "Link the gateway with tcmalloc_minimal (libgoogle-perftools-dev)" ON)
if(SLUICE_TCMALLOC AND (SLUICE_SANITIZE OR SLUICE_FUZZ))
  set(SLUICE_TCMALLOC OFF)
endif()
if(SLUICE_TCMALLOC)
  find_library(SLUICE_TCMALLOC_LIBRARY NAMES tcmalloc_minimal)
  if(NOT SLUICE_TCMALLOC_LIBRARY)
    message(FATAL_ERROR "tcmalloc_minimal not found: install libgoogle-perftools-dev "
                        "(scripts/setup does), or configure with -DSLUICE_TCMALLOC=OFF")
  endif()
endif()
