# Small functions that stamp out Orrery's targets the same way everywhere.

set(ORRERY_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough)
if(ORRERY_WERROR)
  list(APPEND ORRERY_WARNINGS -Werror)
endif()
# GCC 12 at -O3 (a Release build) reports -Wrestrict and -Warray-bounds inside
# libstdc++'s own std::string and tuple code where nothing is wrong (GCC bugs
# 105329 and 105651, fixed in 13); with -Werror, correct code fails to build.
# They stay warnings there; other build types keep their flags (and their cache).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND ORRERY_WARNINGS $<$<CONFIG:Release>:-Wno-error=restrict>
    $<$<CONFIG:Release>:-Wno-error=array-bounds>)
endif()

if(ORRERY_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# orrery_library(NAME SOURCES ... DEPS ... [PRIVATE_DEPS ...])
# One library per source folder; include paths are rooted at the repository so
# code includes "operator/api/spec.h".
function(orrery_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${ORRERY_WARNINGS})
  target_link_libraries(${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
endfunction()

# orrery_binary(NAME SOURCES ... DEPS ...)
function(orrery_binary name)
  cmake_parse_arguments(A "" "OUTPUT_NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_compile_options(${name} PRIVATE ${ORRERY_WARNINGS})
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  if(A_OUTPUT_NAME)
    set_target_properties(${name} PROPERTIES OUTPUT_NAME ${A_OUTPUT_NAME})
  endif()
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# orrery_test(SOURCE [LABEL unit|integration|e2e] [TIMEOUT s] DEPS ...)
# One GoogleTest executable per test file, named after the file; its ctest label
# lets scripts/test run unit tests under the sanitizers and real-cluster tests apart.
function(orrery_test source)
  cmake_parse_arguments(A "" "LABEL;TIMEOUT" "DEPS" ${ARGN})
  if(NOT A_LABEL)
    set(A_LABEL unit)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  get_filename_component(stem ${source} NAME_WE)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/tests ${CMAKE_CURRENT_SOURCE_DIR})
  string(REPLACE "/" "_" prefix "${rel}")
  set(name "${prefix}_${stem}")
  add_executable(${name} ${source})
  target_compile_options(${name} PRIVATE ${ORRERY_WARNINGS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
      ORRERY_SOURCE_DIR="${PROJECT_SOURCE_DIR}" ORRERY_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} --gtest_brief=1)
  set_tests_properties(${name} PROPERTIES LABELS ${A_LABEL} TIMEOUT ${A_TIMEOUT})
endfunction()

# orrery_fuzzer(NAME SOURCE DEPS ...): a libFuzzer target, built when ORRERY_FUZZ is on.
function(orrery_fuzzer name source)
  cmake_parse_arguments(A "" "" "DEPS" ${ARGN})
  if(NOT ORRERY_FUZZ)
    return()
  endif()
  add_executable(${name} ${source})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/fuzz)
endfunction()

# orrery_bench(NAME SOURCES ... DEPS ...): a benchmark binary in build/bench.
function(orrery_bench name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_compile_options(${name} PRIVATE ${ORRERY_WARNINGS})
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  target_compile_definitions(${name} PRIVATE ORRERY_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
endfunction()

# orrery_add_subdirectories([FIRST a b ...]): adds every child folder holding a
# CMakeLists.txt; FIRST ones go first (a part's dependencies must come before it).
function(orrery_add_subdirectories)
  cmake_parse_arguments(A "" "" "FIRST" ${ARGN})
  file(GLOB children RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*/CMakeLists.txt)
  set(dirs ${A_FIRST})
  foreach(c ${children})
    get_filename_component(d ${c} DIRECTORY)
    list(APPEND dirs ${d})
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  foreach(d ${dirs})
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${d}/CMakeLists.txt)
      add_subdirectory(${d})
    endif()
  endforeach()
endfunction()
