# The MPI tests (label mpi): tests/mpi/test_mpi.cpp is one Catch2 program that every rank
# runs, started by mpirun on 2 and 3 ranks of this machine (cmake/mpi.cmake adds Open MPI's
# --oversubscribe and, under root, --allow-run-as-root). Without MPI each test reports
# itself skipped, saying why.
if(CONVGRAPH_HAVE_MPI)
  add_executable(convgraph_test_mpi ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_mpi.cpp)
  target_include_directories(convgraph_test_mpi PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(convgraph_test_mpi PRIVATE convgraph::core Catch2::Catch2 convgraph_flags)
  if(CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo)$")
    target_compile_options(convgraph_test_mpi PRIVATE -O1)
  endif()
  set(convgraph_test_mpi_command $<TARGET_FILE:convgraph_test_mpi>)
endif()
foreach(ranks IN ITEMS 2 3)
  convgraph_add_mpi_test(NAME "mpi: allreduce, broadcast, data-parallel step, tuning agreement (${ranks} ranks)"
    RANKS ${ranks} TIMEOUT 120 COMMAND ${convgraph_test_mpi_command})
endforeach()
