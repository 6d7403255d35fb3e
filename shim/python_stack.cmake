# CPython frame walker (python_stack.h / python_stack.cc) and its per-version
# layouts (python_layout.h / python_layout.cc), linked into
# libcdsa.so. include()d by shim/CMakeLists.txt (and by
# tests/unit/python_stack when the shim does not define it yet).
# Static, position-independent: links into shared objects. No libpython
# dependency: CPython symbols are looked up at run time with dlsym.
if(NOT TARGET cdsa_python_stack)
  add_library(cdsa_python_stack STATIC
    ${CMAKE_CURRENT_LIST_DIR}/python_stack.cc
    ${CMAKE_CURRENT_LIST_DIR}/python_stack.h
    ${CMAKE_CURRENT_LIST_DIR}/python_layout.cc
    ${CMAKE_CURRENT_LIST_DIR}/python_layout.h)
  set_target_properties(cdsa_python_stack PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(cdsa_python_stack PRIVATE -fno-exceptions)
  target_include_directories(cdsa_python_stack PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  target_compile_features(cdsa_python_stack PUBLIC cxx_std_17)
  target_link_libraries(cdsa_python_stack PUBLIC ${CMAKE_DL_LIBS})
endif()
