# Usage: cmake -DLIB=<shared library> -DREADELF=<readelf> -P check_no_libdw_needed.cmake
# Fails if LIB has a DT_NEEDED entry for libdw or libelf.
if(NOT LIB OR NOT EXISTS "${LIB}")
  message(FATAL_ERROR "library not found: '${LIB}'")
endif()
execute_process(COMMAND "${READELF}" -d "${LIB}" OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIB} failed (${rc}): ${err}")
endif()
if(NOT out MATCHES "\\(NEEDED\\)")
  message(FATAL_ERROR "no NEEDED entries at all in ${LIB}? readelf output:\n${out}")
endif()
if(out MATCHES "\\(NEEDED\\)[^\n]*\\[(libdw|libelf)[^]\n]*\\]")
  message(FATAL_ERROR "${LIB} links ${CMAKE_MATCH_1} (must be dlopen'ed only):\n${out}")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${out}")
message(STATUS "OK: no libdw/libelf NEEDED in ${LIB}:\n${needed}")
