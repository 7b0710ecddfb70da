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
