# The interposition layer's end-to-end programs (test_interposition.py, test_real_runtimes.py).
set(_e2e_dir ${CMAKE_BINARY_DIR}/tests/e2e)

add_executable(e2e_interpose_cases programs/interpose_cases.c)
target_link_libraries(e2e_interpose_cases PRIVATE cdsa_sim_cuda_link ${CMAKE_DL_LIBS} Threads::Threads)
set_target_properties(e2e_interpose_cases PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${_e2e_dir})

# Entry points newer than the headers (test_entry_versions.py).
add_executable(e2e_entry_versions programs/entry_versions.c)
target_link_libraries(e2e_entry_versions PRIVATE cdsa_sim_cuda_link)
set_target_properties(e2e_entry_versions PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${_e2e_dir})
# ... and dlsym of names an older driver lacks (over build/lib/sim-stub, the sim as the stub's driver).
add_executable(e2e_driver_names programs/driver_names.c)
target_link_libraries(e2e_driver_names PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(e2e_driver_names PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${_e2e_dir})
add_dependencies(e2e_driver_names cdsa_sim_cuda_stub)

foreach(lib stdio_driver layer_driver fake_cudart)
  add_library(e2e_${lib} SHARED programs/${lib}.c)
  target_include_directories(e2e_${lib} PRIVATE ${CDSA_CUDA_INCLUDE})
  target_link_libraries(e2e_${lib} PRIVATE ${CMAKE_DL_LIBS})
  set_target_properties(e2e_${lib} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${_e2e_dir})
endforeach()
add_dependencies(e2e_interpose_cases e2e_stdio_driver e2e_layer_driver)

# Other interposers (test_other_interposers.py): a GPU-sharing hook built like HAMi-core's libvgpu.so.
add_library(e2e_gpu_share_hook SHARED programs/gpu_share_hook.c)
target_include_directories(e2e_gpu_share_hook PRIVATE ${CDSA_CUDA_INCLUDE})
target_link_libraries(e2e_gpu_share_hook PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
set_target_properties(e2e_gpu_share_hook PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${_e2e_dir})
# ... and a preload that interposes stdio (fputs, fwrite, fputc, putc) and counts the calls.
add_library(e2e_stdio_hook SHARED programs/stdio_hook.c)
target_link_libraries(e2e_stdio_hook PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(e2e_stdio_hook PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${_e2e_dir})
# Third-party libraries, never instrumented: a sanitizer runtime calls the first dlsym in the global scope (the
# hook's) while it initialises, before instrumented code can run.
set_source_files_properties(programs/gpu_share_hook.c programs/stdio_hook.c PROPERTIES COMPILE_OPTIONS
                            "-fno-sanitize=all")

# (8): a library with its own cudart and libcuda in an RTLD_LOCAL group.
add_library(e2e_scope_user SHARED programs/scope_user.c)
target_link_libraries(e2e_scope_user PRIVATE e2e_fake_cudart cdsa_sim_cuda_link ${CMAKE_DL_LIBS})
set_target_properties(e2e_scope_user PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${_e2e_dir})
add_executable(e2e_scope_case programs/scope_case.c)
target_link_libraries(e2e_scope_case PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(e2e_scope_case PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${_e2e_dir})
add_dependencies(e2e_scope_case e2e_scope_user)

# Real cudart as the oracle: nvcc builds one program with static and one with shared cudart.
set(CDSA_NVCC "${CDSA_CUDA_ROOT}/bin/nvcc" CACHE FILEPATH "nvcc for the real-cudart test programs")
if(EXISTS "${CDSA_NVCC}")
  foreach(kind static shared)
    add_custom_command(
      OUTPUT ${_e2e_dir}/cudart_${kind}
      COMMAND ${CDSA_NVCC} -o ${_e2e_dir}/cudart_${kind} -cudart ${kind} -Xlinker -rpath=${CDSA_CUDA_ROOT}/lib64
              ${CMAKE_CURRENT_SOURCE_DIR}/programs/cudart_requests.cu
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/programs/cudart_requests.cu
      COMMENT "nvcc: cudart_${kind}"
      VERBATIM)
    list(APPEND _cudart_programs ${_e2e_dir}/cudart_${kind})
  endforeach()
  add_custom_target(e2e_cudart_programs ALL DEPENDS ${_cudart_programs})
else()
  message(STATUS "no nvcc at ${CDSA_NVCC}: test_real_runtimes.py skips the nvcc-built programs")
endif()

# request_coverage: the request lists of real runtimes (tests/data/requests/), replayed offline.
foreach(suite interposition real_runtimes other_interposers request_coverage)
  add_test(NAME e2e_${suite}
           COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/test_${suite}.py)
  set_tests_properties(e2e_${suite} PROPERTIES ENVIRONMENT
                       "TEST_BUILD_DIR=${CMAKE_BINARY_DIR};TEST_CUDA_ROOT=${CDSA_CUDA_ROOT};TEST_CUDA_HEADERS=${CDSA_CUDA_INCLUDE}"
                       TIMEOUT 1200)
endforeach()
# What a table of other headers than the sim's must pass too (tools/test.sh: build-cuda130).
set_tests_properties(e2e_real_runtimes e2e_request_coverage PROPERTIES LABELS headers)
