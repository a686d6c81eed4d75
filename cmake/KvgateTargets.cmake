# kvgate_module(NAME SOURCES ... DEPS ...) declares one layer's library. DEPS must list only
# the modules the layering in docs/architecture.md allows; nothing else is linked implicitly.
function(kvgate_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT ARG_SOURCES)
    # A module whose code has not landed yet still states its layer's edges.
    add_library(kvgate_${name} INTERFACE)
    target_include_directories(kvgate_${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(kvgate_${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(kvgate_${name} STATIC ${ARG_SOURCES})
  target_include_directories(kvgate_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(kvgate_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  kvgate_warnings(kvgate_${name})
endfunction()

function(kvgate_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)
endfunction()

# kvgate_test(NAME SOURCES ... DEPS ...) builds one GoogleTest binary and registers its tests.
function(kvgate_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    KVGATE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    KVGATE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  kvgate_warnings(${name})
  # An empty LABELS value is dropped from the PROPERTIES pairs, which then read ENVIRONMENT as
  # the label: set labels only when there are some.
  set(properties ENVIRONMENT "KVGATE_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(ARG_LABELS)
    list(APPEND properties LABELS "${ARG_LABELS}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES ${properties})
endfunction()
