# The ctest "docs: ..." (cmake -DBINARY_DIR=... -P): builds the `docs` target and fails on
# any Doxygen warning, so the API reference cannot silently lose pages or links.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} --target docs RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the docs target failed (${rc})")
endif()
if(NOT EXISTS ${BINARY_DIR}/docs/html/index.html)
  message(FATAL_ERROR "no ${BINARY_DIR}/docs/html/index.html")
endif()
file(READ ${BINARY_DIR}/docs/warnings.log warnings)
if(NOT warnings STREQUAL "")
  message(FATAL_ERROR "Doxygen warnings:\n${warnings}")
endif()
