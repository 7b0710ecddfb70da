# SPDX-License-Identifier: Apache-2.0
# The build's version, derived from the source tree (git describe style), and its revision.
#
#   <base>                       a commit tagged v<base> (git describe: distance 0)
#   <base>+<N>.g<hash12>         N commits after the tag v<base>
#   <base>~<N>.g<hash12>         no tag v* yet: <base> is the top-level VERSION file's and N
#                                counts every commit of HEAD
#   from .tarball-version        a source tarball without .git (the tarball carries the file:
#                                "<version> <revision>" on one line)
#   <base>+unknown               neither git nor .tarball-version
#
# N grows with each commit, so a package built after one more commit has a higher Debian
# version (dpkg --compare-versions) and upgrades the one before; the hash names the commit.
# Before the first tag the separator is `~`, which dpkg sorts before the version itself: the
# builds leading up to the first release v<base> rank below it, and that release upgrades them.
# SLUICE_VERSION_OVERRIDE / SLUICE_REVISION_OVERRIDE (cache or -D) replace both, for a build
# whose context holds no .git (the container image's: docker/build-test passes them).
#
# Included from CMakeLists.txt: sets SLUICE_VERSION_FULL and SLUICE_REVISION, writes
# generated/sluice/version.cpp (only when its text changes, so a new commit recompiles one
# file) and makes CMake run again when HEAD moves. Run as a script it prints the version:
#   cmake -DSOURCE_DIR=DIR -P cmake/SluiceVersion.cmake

function(sluice_describe source_dir out_version out_revision)
  file(STRINGS "${source_dir}/VERSION" base LIMIT_COUNT 1)
  string(STRIP "${base}" base)
  set(version "${base}+unknown")
  set(revision "unknown")
  if(EXISTS "${source_dir}/.tarball-version")
    file(STRINGS "${source_dir}/.tarball-version" line LIMIT_COUNT 1)
    separate_arguments(parts UNIX_COMMAND "${line}")
    list(GET parts 0 version)
    list(LENGTH parts n)
    if(n GREATER 1)
      list(GET parts 1 revision)
    endif()
  else()
    find_program(SLUICE_GIT git)
    if(SLUICE_GIT)
      execute_process(COMMAND ${SLUICE_GIT} -C "${source_dir}" rev-parse HEAD
                      OUTPUT_VARIABLE head RESULT_VARIABLE rc ERROR_QUIET
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(rc EQUAL 0)
        set(revision "${head}")
        string(SUBSTRING "${head}" 0 12 short)
        execute_process(COMMAND ${SLUICE_GIT} -C "${source_dir}" describe --tags --long
                                --match "v[0-9]*" --abbrev=12 HEAD
                        OUTPUT_VARIABLE described RESULT_VARIABLE rc ERROR_QUIET
                        OUTPUT_STRIP_TRAILING_WHITESPACE)
        set(separator "+")
        if(rc EQUAL 0 AND described MATCHES "^v(.+)-([0-9]+)-g[0-9a-f]+$")
          set(base "${CMAKE_MATCH_1}")
          set(distance "${CMAKE_MATCH_2}")
        else()
          set(separator "~")
          execute_process(COMMAND ${SLUICE_GIT} -C "${source_dir}" rev-list --count HEAD
                          OUTPUT_VARIABLE distance ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
        endif()
        if(distance STREQUAL "0")
          set(version "${base}")
        else()
          set(version "${base}${separator}${distance}.g${short}")
        endif()
      endif()
    endif()
  endif()
  if(SLUICE_VERSION_OVERRIDE)
    set(version "${SLUICE_VERSION_OVERRIDE}")
  endif()
  if(SLUICE_REVISION_OVERRIDE)
    set(revision "${SLUICE_REVISION_OVERRIDE}")
  endif()
  set(${out_version} "${version}" PARENT_SCOPE)
  set(${out_revision} "${revision}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  if(NOT SOURCE_DIR)
    get_filename_component(SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
  endif()
  sluice_describe("${SOURCE_DIR}" v r)
  message("${v} ${r}")
  return()
endif()

set(SLUICE_VERSION_OVERRIDE "" CACHE STRING "Use this version instead of the tree's")
set(SLUICE_REVISION_OVERRIDE "" CACHE STRING "Use this revision instead of the tree's")
sluice_describe("${PROJECT_SOURCE_DIR}" SLUICE_VERSION_FULL SLUICE_REVISION)
message(STATUS "sluice version ${SLUICE_VERSION_FULL} (revision ${SLUICE_REVISION})")

# Configure again when HEAD moves: HEAD itself (a checkout), the branch it names (a commit) and
# packed-refs (a gc or a fetch). Paths from git, so a worktree's own HEAD is watched.
if(SLUICE_GIT AND NOT EXISTS "${PROJECT_SOURCE_DIR}/.tarball-version")
  foreach(what HEAD packed-refs)
    execute_process(COMMAND ${SLUICE_GIT} -C "${PROJECT_SOURCE_DIR}" rev-parse --git-path ${what}
                    OUTPUT_VARIABLE p ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(p)
      get_filename_component(p "${p}" ABSOLUTE BASE_DIR "${PROJECT_SOURCE_DIR}")
      if(EXISTS "${p}")
        set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${p}")
      endif()
    endif()
  endforeach()
  execute_process(COMMAND ${SLUICE_GIT} -C "${PROJECT_SOURCE_DIR}" symbolic-ref -q HEAD
                  OUTPUT_VARIABLE ref ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(ref)
    execute_process(COMMAND ${SLUICE_GIT} -C "${PROJECT_SOURCE_DIR}" rev-parse --git-path ${ref}
                    OUTPUT_VARIABLE p ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    get_filename_component(p "${p}" ABSOLUTE BASE_DIR "${PROJECT_SOURCE_DIR}")
    if(EXISTS "${p}")
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${p}")
    endif()
  endif()
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/version.cpp.in
               ${PROJECT_BINARY_DIR}/generated/sluice/version.cpp @ONLY)
