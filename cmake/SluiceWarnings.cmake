# SPDX-License-Identifier: Apache-2.0
# Warnings and sanitizers for every sluice target.
function(sluice_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  if(SLUICE_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${SLUICE_SANITIZE} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${SLUICE_SANITIZE})
  endif()
endfunction()
