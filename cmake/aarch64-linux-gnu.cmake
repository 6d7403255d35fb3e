# Cross-building cdsa for aarch64 (Grace hosts) on an x86-64 Debian 12 machine:
#   cmake -S . -B build-aarch64 -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake
# needs Debian's cross compiler (g++-aarch64-linux-gnu) and the arm64 multiarch -dev packages of cdsa's
# dependencies (libunwind-dev:arm64 libdw-dev:arm64 libelf-dev:arm64 libfmt-dev:arm64 libgtest-dev:arm64): tools/setup.sh
# --aarch64 installs them. Every program the build runs itself (gtest_discover_tests lists each test binary's tests)
# and every test ctest starts runs under qemu-user (qemu-aarch64, package qemu-user), with the libraries of the
# arm64 multiarch packages (/lib/ld-linux-aarch64.so.1, /usr/lib/aarch64-linux-gnu).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Debian's multiarch layout: the arm64 packages' headers under /usr/include/aarch64-linux-gnu, their libraries and
# CMake package files under /usr/lib/aarch64-linux-gnu, both under the one root /; the architecture-independent
# ones (nlohmann_json's CMake files in /usr/share) are shared. So the root stays / and CMAKE_LIBRARY_ARCHITECTURE
# steers find_package and find_library to the arm64 directories; programs (python3, the code generators) are the
# host's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# How CMake runs a target binary: test discovery at build time, add_test commands. The loader prefix is / (the
# multiarch libc6:arm64's /lib/ld-linux-aarch64.so.1 and /lib/aarch64-linux-gnu/libc.so.6), not the cross
# toolchain's /usr/aarch64-linux-gnu: that one's ld.so (libc6-arm64-cross 2.36-8) would load the multiarch
# libc.so.6 (2.36-9+deb12u14) for the libraries that live only there (libstdc++, libunwind), and a loader and a libc
# of two builds disagree on their private interface (every std::thread hung in pthread_create).
find_program(CDSA_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR "${CDSA_QEMU_AARCH64};-L;/")

# The host compiler finds the CUDA toolkit's headers that the pinned set (.cuda-headers/, from PyPI's runtime wheel)
# lacks, crt/host_defines.h among them (device_types.h includes it), in /usr/local/include, where this machine's
# toolkit links them; the cross compiler does not search /usr/local/include. The toolkit's include/ is given to it
# last, as a system folder, so a header in both still comes from the pinned set, as on x86-64. Those headers are
# the same for both architectures.
set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES /usr/local/cuda/include)
set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES /usr/local/cuda/include)
