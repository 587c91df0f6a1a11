# Installs the build tree into a temporary prefix, then checks what a user of the package
# meets: an outside project built with find_package(convgraph CONFIG REQUIRED), the same
# program built with pkg-config, and the installed convgraph-bench starting from the prefix.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${prefix}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()

# Internal headers stay out of the installed tree.
file(GLOB_RECURSE installed_headers RELATIVE ${prefix}/include ${prefix}/include/*.hpp)
foreach(h IN LISTS installed_headers)
  if(h MATCHES "cudnn_plan|op_kernels|cuda/device|strided_plan|kernels/")
    message(FATAL_ERROR "internal header installed: ${h}")
  endif()
endforeach()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build
                        -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer project failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer project failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "consumer printed: ${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer ok")
  message(FATAL_ERROR "the consumer program failed: ${rc} ${out}")
endif()

# pkg-config: the same program, compiled and linked with nothing but the .pc file's flags.
find_program(PKG_CONFIG pkg-config)
find_program(CXX_COMPILER NAMES c++ g++)
if(PKG_CONFIG AND CXX_COMPILER)
  set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig:${prefix}/lib64/pkgconfig:${prefix}/lib/x86_64-linux-gnu/pkgconfig)
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs convgraph RESULT_VARIABLE rc
                  OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs convgraph failed: ${rc}")
  endif()
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  execute_process(COMMAND ${CXX_COMPILER} ${SOURCE_DIR}/tests/install/consumer/main.cpp ${pc_flags}
                          -o ${WORK_DIR}/consumer_pc RESULT_VARIABLE rc)
  execute_process(COMMAND ${WORK_DIR}/consumer_pc RESULT_VARIABLE rc2 OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0 OR NOT out MATCHES "consumer ok")
    message(FATAL_ERROR "the pkg-config build of the consumer failed: ${rc} ${rc2} ${out}")
  endif()
  message(STATUS "pkg-config consumer printed: ${out}")
else()
  message(STATUS "pkg-config or a C++ compiler not found: pkg-config consumer not checked")
endif()

# The installed main job starts from its prefix (install RPATH) and runs the quick suite.
if(EXISTS ${prefix}/bin/convgraph-bench)
  execute_process(COMMAND ${prefix}/bin/convgraph-bench --suite quick --repeats 1
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the installed convgraph-bench failed: ${rc}\n${out}\n${err}")
  endif()
  message(STATUS "installed convgraph-bench ran the quick suite")
endif()
