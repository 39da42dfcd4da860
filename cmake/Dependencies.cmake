# Finds the design card's dependencies, each with a message that says how to get it.

find_program(CUDAQ_RT_NVCC nvcc HINTS "$ENV{CUDA_HOME}/bin" /usr/local/cuda/bin)
if(NOT CUDAQ_RT_NVCC)
  message(FATAL_ERROR "nvcc not found: install the CUDA Toolkit 13 (or set CUDA_HOME), "
                      "then run scripts/setup.sh")
endif()
if(NOT CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER "${CUDAQ_RT_NVCC}")
endif()
set(CMAKE_CUDA_ARCHITECTURES OFF)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
enable_language(CUDA)
find_package(CUDAToolkit 13 REQUIRED)
if(NOT TARGET CUDA::nvJitLink) # FindCUDAToolkit names it from CMake 3.26 on
  find_library(CUDAQ_RT_NVJITLINK_LIBRARY nvJitLink HINTS "${CUDAToolkit_LIBRARY_DIR}")
  if(NOT CUDAQ_RT_NVJITLINK_LIBRARY)
    message(FATAL_ERROR "CUDA Toolkit at ${CUDAToolkit_LIBRARY_DIR} has no nvJitLink library")
  endif()
  add_library(CUDA::nvJitLink SHARED IMPORTED)
  set_target_properties(CUDA::nvJitLink PROPERTIES
    IMPORTED_LOCATION "${CUDAQ_RT_NVJITLINK_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDAToolkit_INCLUDE_DIRS}")
endif()

find_package(CLI11 CONFIG QUIET)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp)
  if(NOT CLI11_INCLUDE_DIR)
    message(FATAL_ERROR "CLI11 not found: apt-get install libcli11-dev (scripts/setup.sh does)")
  endif()
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE "${CLI11_INCLUDE_DIR}")
endif()

find_package(nlohmann_json 3 REQUIRED)

# OpenSSL's libcrypto for SHA-256: its assembly (SHA-NI, AVX2) hashes several times faster than
# LLVM's portable C++, and pack hashes every byte of its inputs.
find_package(OpenSSL 3 COMPONENTS Crypto)
if(NOT TARGET OpenSSL::Crypto)
  message(FATAL_ERROR "OpenSSL's libcrypto not found: apt-get install libssl-dev "
                      "(scripts/setup.sh does)")
endif()

# The remote link cache's HTTP client (remote_cache.cpp), linked privately into the runtime.
find_package(CURL 7.85)
if(NOT CURL_FOUND)
  message(FATAL_ERROR "libcurl 7.85 or newer not found: apt-get install libcurl4-openssl-dev "
                      "(scripts/setup.sh does)")
endif()

# libzstd: link cache entries are stored compressed (cache_entry.cpp).
find_path(CUDAQ_RT_ZSTD_INCLUDE_DIR zstd.h)
find_library(CUDAQ_RT_ZSTD_LIBRARY zstd)
if(NOT CUDAQ_RT_ZSTD_INCLUDE_DIR OR NOT CUDAQ_RT_ZSTD_LIBRARY)
  message(FATAL_ERROR "libzstd not found: apt-get install libzstd-dev (scripts/setup.sh does)")
endif()
add_library(cudaq_rt_zstd INTERFACE)
target_include_directories(cudaq_rt_zstd SYSTEM INTERFACE ${CUDAQ_RT_ZSTD_INCLUDE_DIR})
target_link_libraries(cudaq_rt_zstd INTERFACE ${CUDAQ_RT_ZSTD_LIBRARY})

# LLVM libObject, linked statically so the tools need no libLLVM at run time.
find_package(LLVM 14 CONFIG REQUIRED HINTS /usr/lib/llvm-14/lib/cmake/llvm)
llvm_map_components_to_libnames(CUDAQ_RT_LLVM_LIBS object)
add_library(cudaq_rt_llvm INTERFACE)
target_include_directories(cudaq_rt_llvm SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS})
target_link_libraries(cudaq_rt_llvm INTERFACE ${CUDAQ_RT_LLVM_LIBS})
target_link_options(cudaq_rt_llvm INTERFACE "LINKER:--as-needed")

if(CUDAQ_RT_BUILD_TESTS)
  find_package(doctest QUIET)
  if(NOT doctest_FOUND)
    find_path(DOCTEST_INCLUDE_DIR doctest/doctest.h)
    if(NOT DOCTEST_INCLUDE_DIR)
      message(FATAL_ERROR "doctest not found: apt-get install doctest-dev (scripts/setup.sh does)")
    endif()
    add_library(doctest::doctest INTERFACE IMPORTED)
    target_include_directories(doctest::doctest INTERFACE "${DOCTEST_INCLUDE_DIR}")
  endif()
  find_program(CUDAQ_RT_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(NOT CUDAQ_RT_PYTHON)
    message(FATAL_ERROR "/usr/bin/python3 not found (integration tests and schema checks use it)")
  endif()
endif()
