# cmake -DSOURCE_DIR=... -DOUTPUT=... -P git_commit.cmake: writes OUTPUT defining
# CONVGRAPH_GIT_COMMIT ("git describe --always --dirty" of SOURCE_DIR, "unknown" without
# git). Run at every build; the file is rewritten only when the text changes, so only its
# users recompile, and only after a commit (or a change between clean and dirty).
set(commit unknown)
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} describe --always --dirty --abbrev=12
    OUTPUT_VARIABLE described RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND described)
    set(commit ${described})
  endif()
endif()
file(CONFIGURE OUTPUT ${OUTPUT} CONTENT "#pragma once\n#define CONVGRAPH_GIT_COMMIT \"${commit}\"\n" @ONLY)
