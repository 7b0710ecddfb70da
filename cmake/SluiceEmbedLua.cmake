# SPDX-License-Identifier: Apache-2.0
# sluice_embed_lua(OUTPUT file.cpp [SCRIPTS a.lua ...] [BUNDLE name PARTS p1.lua p2.lua ...])
# Generates a C++ source defining sluice::lua::<stem>() -> std::string_view for each script,
# and for the bundle (its PARTS concatenated in order, defining a Lua function <name>):
# sluice::lua::<name>() (a script calling it, for SCRIPT LOAD / EVALSHA), <name>_library() (a
# function library registering it, for FUNCTION LOAD / FCALL) and <name>_function() (the name
# it is registered under), so the scripts ship inside the binary (cmake/embed_lua.cmake).
function(sluice_embed_lua)
  cmake_parse_arguments(ARG "" "OUTPUT;BUNDLE" "SCRIPTS;PARTS" ${ARGN})
  add_custom_command(
    OUTPUT ${ARG_OUTPUT}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${ARG_OUTPUT} "-DSCRIPTS=${ARG_SCRIPTS}"
            "-DBUNDLE=${ARG_BUNDLE}" "-DPARTS=${ARG_PARTS}"
            -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_lua.cmake
    DEPENDS ${ARG_SCRIPTS} ${ARG_PARTS} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_lua.cmake
    COMMENT "Embedding Lua scripts"
    VERBATIM)
endfunction()
