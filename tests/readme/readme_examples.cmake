# The README's ```cpp blocks, compiled and run as tests so the documentation cannot rot.
# At configure time a block with its own main() becomes an executable; every other block
# (a fragment) becomes a function of one generated source, with the names it uses from
# its surroundings defined by readme_context.hpp. `#line` points compile errors at
# README.md. ctest runs each block as "readme: example at README.md:LINE".
set(readme ${PROJECT_SOURCE_DIR}/README.md)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${readme})
file(READ ${readme} rest)

set(fence "```")
set(body "")
set(table "")
set(tests "")
set(consumed_lines 1)
set(index 0)
add_custom_target(convgraph_readme_examples)  # builds every README example
while(TRUE)
  string(FIND "${rest}" "${fence}cpp\n" open)
  if(open EQUAL -1)
    break()
  endif()
  # Line number of the block's first code line: count newlines before it.
  string(SUBSTRING "${rest}" 0 ${open} before)
  string(REGEX MATCHALL "\n" newlines "${before}")
  list(LENGTH newlines n_before)
  math(EXPR first_line "${consumed_lines} + ${n_before} + 1")
  math(EXPR code_start "${open} + 7")
  string(SUBSTRING "${rest}" ${code_start} -1 rest)
  string(FIND "${rest}" "${fence}" close)
  string(SUBSTRING "${rest}" 0 ${close} code)
  string(SUBSTRING "${rest}" ${close} -1 rest)
  string(REGEX MATCHALL "\n" newlines "${code}")
  list(LENGTH newlines n_code)
  math(EXPR consumed_lines "${first_line} + ${n_code}")

  if(code MATCHES "int main\\(")
    # A whole program: built as its own executable, as a reader would build it.
    set(program ${CMAKE_CURRENT_BINARY_DIR}/readme_program_${first_line}.cpp)
    file(CONFIGURE OUTPUT ${program} CONTENT "#line ${first_line} \"${readme}\"\n${code}")
    add_executable(convgraph_readme_program_${first_line} ${program})
    target_link_libraries(convgraph_readme_program_${first_line} PRIVATE convgraph::core convgraph_flags)
    add_dependencies(convgraph_readme_examples convgraph_readme_program_${first_line})
    set(command convgraph_readme_program_${first_line})
  else()
    string(APPEND body "static void readme_example_${index}() {\n  using namespace convgraph;\n  using namespace convgraph::readme_context;\n#line ${first_line} \"${readme}\"\n${code}}\n\n")
    string(APPEND table "    {${first_line}, readme_example_${index}},\n")
    set(command convgraph_readme_fragments ${first_line})
  endif()
  set(test "readme: example at README.md:${first_line}")
  list(APPEND tests ${test})
  set(command_${first_line} ${command})
  math(EXPR index "${index} + 1")
endwhile()

# The fragments: one function each in one generated source, run by line number.
set(generated ${CMAKE_CURRENT_BINARY_DIR}/readme_fragments.cpp)
file(CONFIGURE OUTPUT ${generated} CONTENT
"// Generated from README.md by tests/readme/readme_examples.cmake: do not edit.
#include \"readme/readme_context.hpp\"

@body@int main(int argc, char** argv) {
  struct Example { int line; void (*run)(); };
  const Example examples[] = {
    {0, nullptr},
@table@  };
  const int line = argc > 1 ? std::atoi(argv[1]) : -1;
  for (const Example& e : examples) {
    if (!e.run || e.line != line) continue;
    try {
      e.run();
      return 0;
    } catch (const std::exception& err) {
      std::fprintf(stderr, \"README.md:%d: %s\\n\", e.line, err.what());
      return 1;
    }
  }
  std::fprintf(stderr, \"no README fragment starts at line %d\\n\", line);
  return 2;
}
" @ONLY)
add_executable(convgraph_readme_fragments ${generated})
target_include_directories(convgraph_readme_fragments PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(convgraph_readme_fragments PRIVATE convgraph::core convgraph_flags)
add_dependencies(convgraph_readme_examples convgraph_readme_fragments)
# A fragment may end with the values it illustrates, unused.
target_compile_options(convgraph_readme_fragments PRIVATE -Wno-unused-variable)

foreach(test IN LISTS tests)
  string(REGEX MATCH "[0-9]+$" line "${test}")
  add_test(NAME "${test}" COMMAND ${command_${line}})
  set_tests_properties("${test}" PROPERTIES TIMEOUT 60 LABELS unit)
endforeach()
