# SPDX-License-Identifier: Apache-2.0
# Install rules and the Debian package (CPack DEB) of the `sluice` executable.
#
# Installed: the binary, the service's rules file (config/service.yaml, a conffile in the
# package), a systemd unit, README.md with the operators' and the clients' guides (docs/, beside
# it as in the source tree, so the README's links hold) and the quick start's rules file as an
# example. Test and benchmark executables are never installed.
#
# The package is built from a tree configured with CMAKE_INSTALL_PREFIX=/usr (scripts/package):
# GNUInstallDirs then puts the system configuration directory at /etc, and the unit names
# /usr/bin/sluice and /etc/sluice/sluice.yaml. Under any other prefix (/usr/local by default)
# every path, the rules file's included, stays inside the prefix.
include(GNUInstallDirs)

set(SLUICE_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit is installed: relative to the install prefix, or absolute")
set(SLUICE_PACKAGE_MAINTAINER
    "sluice maintainers <maintainers@sluice.invalid>"
    CACHE STRING "The Maintainer field of the Debian package")

# GNUInstallDirs maps sysconfdir outside the prefix for /usr (and / and /opt/...); follow it
# there with an absolute destination, and stay relative (relocatable with `--prefix`) elsewhere.
if(CMAKE_INSTALL_FULL_SYSCONFDIR STREQUAL "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}")
  set(sluice_confdir "${CMAKE_INSTALL_SYSCONFDIR}/sluice")
else()
  set(sluice_confdir "${CMAKE_INSTALL_FULL_SYSCONFDIR}/sluice")
endif()
set(SLUICE_CONFIG_PATH "${CMAKE_INSTALL_FULL_SYSCONFDIR}/sluice/sluice.yaml")
set(SLUICE_BINARY_PATH "${CMAKE_INSTALL_FULL_BINDIR}/sluice")
set(SLUICE_DOCDIR "${CMAKE_INSTALL_FULL_DOCDIR}")
if(IS_ABSOLUTE "${SLUICE_SYSTEMD_UNITDIR}")
  set(SLUICE_UNIT_PATH "${SLUICE_SYSTEMD_UNITDIR}/sluice.service")
else()
  set(SLUICE_UNIT_PATH "${CMAKE_INSTALL_PREFIX}/${SLUICE_SYSTEMD_UNITDIR}/sluice.service")
endif()

configure_file(${PROJECT_SOURCE_DIR}/packaging/sluice.service.in
               ${PROJECT_BINARY_DIR}/packaging/sluice.service @ONLY)

install(TARGETS sluice RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/config/service.yaml
        DESTINATION ${sluice_confdir} RENAME sluice.yaml)
install(FILES ${PROJECT_BINARY_DIR}/packaging/sluice.service DESTINATION ${SLUICE_SYSTEMD_UNITDIR})
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
# OPTIONAL: a build from a partial copy of the tree (a build context that holds only what the
# compile reads) still installs; tests/packaging checks that the package has them.
install(FILES ${PROJECT_SOURCE_DIR}/docs/operating.md ${PROJECT_SOURCE_DIR}/docs/clients.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs OPTIONAL)
install(FILES ${PROJECT_SOURCE_DIR}/config/sluice.yaml DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# The licence (Debian's machine-readable copyright file) and a Debian changelog naming this
# build's version and revision, dated by the commit (so a rebuild of one commit is the same
# file), compressed as Debian policy §12.7 asks (gzip -9n: no name or time stamp inside).
install(FILES ${PROJECT_SOURCE_DIR}/packaging/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
set(SLUICE_CHANGELOG_DATE "")
if(SLUICE_GIT AND NOT SLUICE_REVISION STREQUAL "unknown")
  execute_process(COMMAND ${SLUICE_GIT} -C "${PROJECT_SOURCE_DIR}" log -1
                          "--date=format:%a, %d %b %Y %H:%M:%S %z" --format=%cd ${SLUICE_REVISION}
                  OUTPUT_VARIABLE SLUICE_CHANGELOG_DATE ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
if(NOT SLUICE_CHANGELOG_DATE)
  string(TIMESTAMP SLUICE_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
endif()
configure_file(${PROJECT_SOURCE_DIR}/packaging/debian/changelog.in
               ${PROJECT_BINARY_DIR}/packaging/changelog @ONLY)
execute_process(COMMAND gzip -9nc ${PROJECT_BINARY_DIR}/packaging/changelog
                OUTPUT_FILE ${PROJECT_BINARY_DIR}/packaging/changelog.gz)
install(FILES ${PROJECT_BINARY_DIR}/packaging/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The manual page (packaging/sluice.1), compressed the same way.
execute_process(COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/packaging/sluice.1
                OUTPUT_FILE ${PROJECT_BINARY_DIR}/packaging/sluice.1.gz)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/packaging/sluice.1)
install(FILES ${PROJECT_BINARY_DIR}/packaging/sluice.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# --- Debian package ---------------------------------------------------------------------------
# dpkg does not treat /etc files as conffiles by itself (debhelper would list them): say so.
file(WRITE ${PROJECT_BINARY_DIR}/packaging/conffiles "${SLUICE_CONFIG_PATH}\n")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sluice)
# The tree's version (cmake/SluiceVersion.cmake): a package built after one more commit has a
# higher version, so installing it upgrades the one before.
set(CPACK_PACKAGE_VERSION ${SLUICE_VERSION_FULL})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "rate-limiting HTTP reverse proxy")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})  # the paths the unit names
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)                     # sluice_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${SLUICE_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION httpd)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The extended description; CPack puts the summary above it and indents each line.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
"sluice sits in front of an HTTP API, identifies each caller (API key,
user, client address) and decides every limit of a request in one atomic
script in Redis (or in memory, for a single instance), then forwards the
request upstream or answers 429 with Retry-After and RateLimit headers.
The systemd unit is installed disabled.")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS redis-server)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_BINARY_DIR}/packaging/conffiles
    ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
    ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
    ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

# Depends: computed from the binary's shared libraries by dpkg-shlibdeps (dpkg-dev) where it is
# installed; otherwise the Debian bookworm packages of those libraries, named by hand.
find_program(SLUICE_DPKG_SHLIBDEPS dpkg-shlibdeps)
find_program(SLUICE_FILE file)
if(SLUICE_DPKG_SHLIBDEPS AND SLUICE_FILE)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  string(JOIN ", " CPACK_DEBIAN_PACKAGE_DEPENDS
    libboost-program-options1.81.0 libc6 libfmt9 libgcc-s1 libgrpc++1.51 libgrpc29 libhiredis0.14
    libprometheus-cpp-core1.0 libprotobuf32 libspdlog1.10 libssl3 libstdc++6 libtcmalloc-minimal4
    libyaml-cpp0.7)
endif()

include(CPack)
