# SPDX-License-Identifier: Apache-2.0
# sluice_protos(TARGET ROOT dir FILES a.proto... GRPC a.proto...): a static library of the
# C++ messages of FILES (paths relative to ROOT) and the gRPC stubs of the GRPC ones, generated
# into the build tree by protoc (and grpc_cpp_plugin) whenever a .proto changes. The generated
# headers are included as "envoy/service/ratelimit/v3/rls.grpc.pb.h" and so on.
function(sluice_protos target)
  cmake_parse_arguments(ARG "" "ROOT" "FILES;GRPC" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated/proto)
  file(MAKE_DIRECTORY ${out})
  set(sources)
  foreach(f IN LISTS ARG_FILES)
    string(REGEX REPLACE "\\.proto$" "" stem ${f})
    set(outs ${out}/${stem}.pb.cc ${out}/${stem}.pb.h)
    set(args --cpp_out=${out})
    if(f IN_LIST ARG_GRPC)
      list(APPEND outs ${out}/${stem}.grpc.pb.cc ${out}/${stem}.grpc.pb.h)
      list(APPEND args --grpc_out=${out} --plugin=protoc-gen-grpc=${SLUICE_GRPC_CPP_PLUGIN})
    endif()
    add_custom_command(
      OUTPUT ${outs}
      COMMAND protobuf::protoc -I ${ARG_ROOT} -I ${Protobuf_INCLUDE_DIRS} ${args}
              ${ARG_ROOT}/${f}
      DEPENDS ${ARG_ROOT}/${f} protobuf::protoc
      COMMENT "protoc ${f}"
      VERBATIM)
    foreach(o IN LISTS outs)
      if(o MATCHES "\\.cc$")
        list(APPEND sources ${o})
      endif()
    endforeach()
  endforeach()
  add_library(${target} STATIC ${sources})
  # Generated code: no project warnings.
  target_include_directories(${target} SYSTEM PUBLIC ${out})
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf PkgConfig::grpcpp)
endfunction()
