# MPI (data-parallel training, dist/) and NCCL (its GPU path). Sets CONVGRAPH_HAVE_MPI and
# CONVGRAPH_HAVE_NCCL, and convgraph_add_mpi_test() for tests that run on several ranks of
# this machine.
set(CONVGRAPH_WITH_MPI AUTO CACHE STRING "Build data-parallel training on MPI: AUTO (when MPI is found), ON or OFF")
set_property(CACHE CONVGRAPH_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set(CONVGRAPH_HAVE_MPI OFF)
set(CONVGRAPH_HAVE_NCCL OFF)
if(CONVGRAPH_WITH_MPI STREQUAL "AUTO" AND (CONVGRAPH_SANITIZE OR CONVGRAPH_TSAN))
  # Sanitizer builds leave MPI out unless asked (ON): LeakSanitizer reports Open MPI's
  # own never-freed allocations, and CI's time budget has no room for a second MPI run.
  message(STATUS "convgraph: MPI off in sanitizer builds (CONVGRAPH_WITH_MPI=ON forces it)")
elseif(NOT CONVGRAPH_WITH_MPI STREQUAL "OFF")
  # The CXX component in a C++ project, without the deprecated C++ bindings: convgraph
  # uses MPI's C API.
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND AND MPIEXEC_EXECUTABLE)
    set(CONVGRAPH_HAVE_MPI ON)
  elseif(CONVGRAPH_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "CONVGRAPH_WITH_MPI=ON but no MPI was found (Debian: libopenmpi-dev openmpi-bin)")
  endif()
endif()
if(CONVGRAPH_HAVE_MPI AND CONVGRAPH_HAVE_CUDA)
  # NCCL ships with the CUDA toolkit on these machines (Debian's libnccl-dev is not in
  # the configured sources).
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_DIR}/.. ENV NCCL_ROOT
    PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(CONVGRAPH_HAVE_NCCL ON)
  endif()
endif()
message(STATUS "convgraph: MPI ${CONVGRAPH_HAVE_MPI}, NCCL ${CONVGRAPH_HAVE_NCCL}")

# The launcher's arguments for N ranks on this machine: Open MPI needs --oversubscribe for
# more ranks than cores, and --allow-run-as-root under root (containers, CI).
set(CONVGRAPH_MPIEXEC_FLAGS)
if(CONVGRAPH_HAVE_MPI)
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _mpiexec_version ERROR_QUIET)
  if(_mpiexec_version MATCHES "Open MPI|OpenRTE")
    list(APPEND CONVGRAPH_MPIEXEC_FLAGS --oversubscribe)
    execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_uid STREQUAL "0")
      list(APPEND CONVGRAPH_MPIEXEC_FLAGS --allow-run-as-root)
    endif()
  endif()
endif()

# convgraph_add_mpi_test(NAME name RANKS n COMMAND exe args...): runs the command on n
# ranks (label mpi). Without MPI it is a test that says it skipped and why.
function(convgraph_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;RANKS;TIMEOUT" "COMMAND" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(CONVGRAPH_HAVE_MPI)
    add_test(NAME "${T_NAME}" COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${T_RANKS}
      ${CONVGRAPH_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS} ${T_COMMAND} ${MPIEXEC_POSTFLAGS})
  else()
    add_test(NAME "${T_NAME}" COMMAND ${CMAKE_COMMAND} -E echo
      "SKIPPED: convgraph was built without MPI (CONVGRAPH_WITH_MPI=${CONVGRAPH_WITH_MPI}; install libopenmpi-dev and openmpi-bin, or see the configure log)")
  endif()
  # One rank per core when there are enough; the ranks of one test are one job.
  set_tests_properties("${T_NAME}" PROPERTIES LABELS mpi TIMEOUT ${T_TIMEOUT} PROCESSORS 2
    SKIP_REGULAR_EXPRESSION "SKIPPED: " ENVIRONMENT "CONVGRAPH_THREADS=1")
endfunction()
