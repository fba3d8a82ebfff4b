# Run after a GoogleTest binary is built (cmake -P): lists its test cases and writes the CTest file
# that registers one CTest entry per test suite, the suite's cases run in one process. Starting a
# process that loads LibTorch costs about half a second, which is most of what a typical case
# costs; one process per suite keeps the suite fast without hiding a failure (the output names
# each failed case).
#
# A suite's *_CUDA cases are an entry of their own, <suite>_CUDA (without a GPU they all skip);
# the other cases are the entry <suite>. An entry is reported as skipped when none of its cases
# passed and none failed; a skip among passing cases shows in the output only.
#
# Variables: BINARY, OUTPUT (the CTest file), LABEL, WORKING_DIRECTORY, ENVIRONMENT (one
# NAME=value), FIXTURES (fixture names separated by commas, may be empty).
cmake_minimum_required(VERSION 3.22)
foreach(var BINARY OUTPUT LABEL WORKING_DIRECTORY)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "discover_suites.cmake: ${var} is not set")
  endif()
endforeach()

execute_process(COMMAND ${BINARY} --gtest_list_tests
                WORKING_DIRECTORY ${WORKING_DIRECTORY}
                TIMEOUT 120
                RESULT_VARIABLE result
                OUTPUT_VARIABLE listing
                ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests failed (${result}):\n${listing}\n${errors}")
endif()

# The listing: "Suite." at the start of a line (a typed or parameterised suite's line ends with
# a "# TypeParam = ..." comment), then its cases indented by two spaces ("  Case  # GetParam()").
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite ${CMAKE_MATCH_1})
    list(APPEND suites ${suite})
    set(cases_${suite} 0)
    set(cuda_${suite} 0)
  elseif(line MATCHES "^  ([^ ]+)" AND suite)
    if(CMAKE_MATCH_1 MATCHES "_CUDA")
      math(EXPR cuda_${suite} "${cuda_${suite}} + 1")
    else()
      math(EXPR cases_${suite} "${cases_${suite}} + 1")
    endif()
  endif()
endforeach()
if(NOT suites)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests listed no test suite:\n${listing}")
endif()

string(REPLACE "," ";" fixtures "${FIXTURES}")
set(common "LABELS [==[${LABEL}]==] WORKING_DIRECTORY [==[${WORKING_DIRECTORY}]==]")
if(ENVIRONMENT)
  string(APPEND common " ENVIRONMENT [==[${ENVIRONMENT}]==]")
endif()
if(fixtures)
  string(APPEND common " FIXTURES_REQUIRED [==[${fixtures}]==]")
endif()
# Skipped: no case passed, and the output ends with the list of skipped cases (a failure would
# follow it).
set(skip_regex "\\[  PASSED  \\] 0 tests\\.\n(\\[  SKIPPED \\][^\n]*\n?)+$")
set(skipped "SKIP_REGULAR_EXPRESSION [==[${skip_regex}]==]")

set(text "# Written by tests/discover_suites.cmake from ${BINARY} --gtest_list_tests\n")
foreach(suite IN LISTS suites)
  if(cases_${suite} GREATER 0)
    set(filter "${suite}.*")
    if(cuda_${suite} GREATER 0)
      set(filter "${suite}.*-${suite}.*_CUDA*")
    endif()
    string(APPEND text
           "add_test([==[${suite}]==] [==[${BINARY}]==] [==[--gtest_filter=${filter}]==])\n"
           "set_tests_properties([==[${suite}]==] PROPERTIES ${common} ${skipped})\n")
  endif()
  if(cuda_${suite} GREATER 0)
    string(APPEND text
           "add_test([==[${suite}_CUDA]==] [==[${BINARY}]==] "
           "[==[--gtest_filter=${suite}.*_CUDA*]==])\n"
           "set_tests_properties([==[${suite}_CUDA]==] PROPERTIES ${common} ${skipped})\n")
  endif()
endforeach()
file(WRITE ${OUTPUT} "${text}")
