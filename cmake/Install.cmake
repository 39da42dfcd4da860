# What `cmake --install` puts under the prefix, and the CMake package that find_package(cudaq-rt)
# loads from there:
#
#   bin/                              cudaq-rt-pack, cudaq-rt-link, cudaq-rt-run, cudaq-rt-client
#   lib/libcudaq_rt.so*               the runtime library (below)
#   lib/cudaq-rt/bridges/             the bundled bridges: the runtime looks in
#                                     <executable>/../lib/cudaq-rt/bridges, so this stays "lib"
#                                     whatever CMAKE_INSTALL_LIBDIR says
#   lib/cudaq-rt/python/              cudaq_rt_client, the Python package bin/cudaq-rt-client runs
#                                     (it looks in <script>/../lib/cudaq-rt/python, so "lib" too),
#                                     and cudaq_rt, the C API in Python
#   include/cudaq_rt/                 the public headers (the C API, the bridge loader) and the
#                                     device contract; the runtime's internal headers stay in the tree
#   lib/cmake/cudaq-rt/               cudaq-rtConfig.cmake, its targets, CudaDeviceCode.cmake,
#                                     CudaqRtPackage.cmake
#   share/cudaq-rt/schemas/           JSON Schemas of the files the tools write
#   lib/pkgconfig/cudaq-rt.pc         for projects without CMake (the C API)
#   share/man/man{1,3,5,7}/           the man pages, and per C API function a page that opens
#                                     cudaq_rt(3) (`man cudaq_rt_load`)
#
# The runtime library is built STATIC, for the tests and benchmarks, and SHARED from the same
# objects: libcudaq_rt.so, which the tools link (one copy of the runtime and of LLVM in an
# install, not one per tool) and other projects use. A static library would hand those LLVM's,
# nvJitLink's, libcrypto's and libcurl's link lines too (a find_dependency(OpenSSL) and (CURL) in
# the config). Into the shared one LLVM goes
# into it statically with its symbols hidden (--exclude-libs), NVRTC stays a shared dependency,
# found through the RUNPATH of the toolkit the build used (nvJitLink is loaded at run time, through
# the same RUNPATH by default: base/nvjitlink_library.cpp), and libcrypto (OpenSSL 3)
# and libcurl (the remote link cache) ones found in the system's library path; the config needs
# none of them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
include(cmake/CudaqRtPackage.cmake)

# The names other projects see, usable in the build tree too (cudaq_rt_add_package and
# cudaq_rt_device_code use them).
add_library(cudaq-rt::headers ALIAS cudaq_rt_device_headers)
add_executable(cudaq-rt::pack ALIAS cudaq-rt-pack)
add_executable(cudaq-rt::link ALIAS cudaq-rt-link)
add_executable(cudaq-rt::run ALIAS cudaq-rt-run)

add_library(cudaq_rt_shared SHARED $<TARGET_OBJECTS:cudaq_rt> $<TARGET_OBJECTS:cudaq_rt_load>
                                   $<TARGET_OBJECTS:cudaq_rt_command>
                                   $<TARGET_OBJECTS:cudaq_rt_builtin_dispatcher_blob>)
target_include_directories(cudaq_rt_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/runtime/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# Its headers use std::span and std::filesystem: consumers compile them as C++20.
target_compile_features(cudaq_rt_shared PUBLIC cxx_std_20)
target_link_libraries(cudaq_rt_shared
  PUBLIC cudaq_rt_device_headers nlohmann_json::nlohmann_json ${CMAKE_DL_LIBS}
  PRIVATE cudaq_rt_llvm CUDA::nvrtc OpenSSL::Crypto CURL::libcurl cudaq_rt_zstd)
# --exclude-libs hides what comes from LLVM's archives; the version script hides the LLVM
# template instances our own objects hold (llvm::Expected<...>), so that neither can bind to, or be
# bound by, another LLVM in the same process.
file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/cudaq_rt.map" CONTENT [[
{
  global: *;
  local: extern "C++" { *llvm::*; };
};
]])
target_link_options(cudaq_rt_shared PRIVATE "LINKER:--exclude-libs,ALL"
                                            "LINKER:--version-script=${CMAKE_BINARY_DIR}/cudaq_rt.map")
set_property(TARGET cudaq_rt_shared APPEND PROPERTY LINK_DEPENDS "${CMAKE_BINARY_DIR}/cudaq_rt.map")
add_dependencies(cudaq_rt_shared cudaq_rt cudaq_rt_load cudaq_rt_command)
set_target_properties(cudaq_rt_shared PROPERTIES
  OUTPUT_NAME cudaq_rt EXPORT_NAME runtime
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/lib"
  INSTALL_RPATH_USE_LINK_PATH ON)
add_library(cudaq-rt::runtime ALIAS cudaq_rt_shared)

# Installed tools find libcudaq_rt.so beside them (bin/../LIBDIR), which finds libnvJitLink
# through its own RUNPATH.
foreach(tool pack link run)
  set_target_properties(cudaq-rt-${tool} PROPERTIES EXPORT_NAME ${tool}
    INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}" INSTALL_RPATH_USE_LINK_PATH ON)
endforeach()
set_target_properties(cudaq_rt_device_headers PROPERTIES EXPORT_NAME headers)

set(CUDAQ_RT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/cudaq-rt")
set(CUDAQ_RT_INSTALL_BRIDGEDIR "lib/cudaq-rt/bridges")
set(CUDAQ_RT_INSTALL_SCHEMADIR "${CMAKE_INSTALL_DATADIR}/cudaq-rt/schemas")

install(TARGETS cudaq-rt-pack cudaq-rt-link cudaq-rt-run cudaq_rt_shared cudaq_rt_device_headers
        EXPORT cudaq-rtTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The built-in dispatchers' units, compiled at build time (tools/CMakeLists.txt), beside the
# bridges, where links look for them.
install(DIRECTORY "${CMAKE_BINARY_DIR}/lib/cudaq-rt/units" DESTINATION lib/cudaq-rt
        PATTERN "stats" EXCLUDE)
# The nvJitLink interposers, one per major (man/cudaq-rt-nvjitlink.7): preloaded, or put ahead of
# the real library on the loader's path; nothing links against them. libcudaq_rt_nvjitlink.so is
# the CUDA 13 one under the name it had before there were two.
install(TARGETS ${CUDAQ_RT_INTERPOSERS} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES "${CMAKE_BINARY_DIR}/lib/libcudaq_rt_nvjitlink.so" DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The reference client of the wire format over UDP (cudaq-rt-run --serve): the launcher, and the
# package it puts on sys.path (`pip install ./python` installs the same package as a wheel).
install(PROGRAMS tools/cudaq-rt-client.py DESTINATION ${CMAKE_INSTALL_BINDIR}
        RENAME cudaq-rt-client)
install(DIRECTORY python/cudaq_rt_client DESTINATION lib/cudaq-rt/python
        FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE)
# cudaq_rt, the C API in Python, beside it: with PYTHONPATH=<prefix>/lib/cudaq-rt/python it finds
# this prefix's libcudaq_rt.so (python/cudaq_rt/_library.py).
install(DIRECTORY python/cudaq_rt DESTINATION lib/cudaq-rt/python
        FILES_MATCHING PATTERN "*.py" PATTERN "*.pyi" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE
        PATTERN "lib" EXCLUDE)
install(DIRECTORY runtime/include/cudaq_rt libdispatch/include/cudaq_rt
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY schemas/ DESTINATION ${CUDAQ_RT_INSTALL_SCHEMADIR}
        FILES_MATCHING PATTERN "*.json")
foreach(section 1 3 5 7)
  install(DIRECTORY man/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
          FILES_MATCHING PATTERN "*.${section}")
endforeach()
# The C API's functions (runtime/include/cudaq_rt/cudaq_rt.h), each installed as a page that
# sources cudaq_rt(3), so that `man cudaq_rt_load` opens it. integration.tools fails when this
# list, the header and cudaq_rt.3's NAME and SYNOPSIS do not name the same functions.
set(CUDAQ_RT_C_API_FUNCTIONS
  cudaq_rt_config_init cudaq_rt_last_error
  cudaq_rt_open_package cudaq_rt_open_self cudaq_rt_code_destroy cudaq_rt_code_handler
  cudaq_rt_code_check_trust cudaq_rt_find_dispatch_kernel
  cudaq_rt_server_create cudaq_rt_server_configure cudaq_rt_server_destroy
  cudaq_rt_load cudaq_rt_lookup_handler cudaq_rt_set_function cudaq_rt_clear_functions
  cudaq_rt_set_global cudaq_rt_start cudaq_rt_stop cudaq_rt_check cudaq_rt_reload
  cudaq_rt_slot_size cudaq_rt_get_stats cudaq_rt_send cudaq_rt_receive cudaq_rt_call
  cudaq_rt_call_batch cudaq_rt_bench)
file(MAKE_DIRECTORY "${CMAKE_BINARY_DIR}/man/man3")
foreach(fn IN LISTS CUDAQ_RT_C_API_FUNCTIONS)
  file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/man/man3/${fn}.3" CONTENT ".so man3/cudaq_rt.3\n")
  install(FILES "${CMAKE_BINARY_DIR}/man/man3/${fn}.3" DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)
endforeach()

install(EXPORT cudaq-rtTargets NAMESPACE cudaq-rt:: DESTINATION ${CUDAQ_RT_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/cudaq-rtConfig.cmake.in
  "${CMAKE_BINARY_DIR}/cmake/cudaq-rtConfig.cmake"
  INSTALL_DESTINATION ${CUDAQ_RT_INSTALL_CMAKEDIR}
  PATH_VARS CUDAQ_RT_INSTALL_BRIDGEDIR CUDAQ_RT_INSTALL_SCHEMADIR)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/cmake/cudaq-rtConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/cmake/cudaq-rtConfig.cmake"
              "${CMAKE_BINARY_DIR}/cmake/cudaq-rtConfigVersion.cmake"
              cmake/CudaDeviceCode.cmake cmake/CudaqRtPackage.cmake
        DESTINATION ${CUDAQ_RT_INSTALL_CMAKEDIR})

# A pkg-config file for projects that do not use CMake: `cc prog.c $(pkg-config --cflags --libs
# cudaq-rt)` against the C API. Relocatable: the prefix is found from the file's own place, so
# that `cmake --install --prefix DIR` anywhere gives a file that is right there. Libs carries the
# library directory as a run path too: a prefix the loader does not search is the common case, and
# without it the program stops at its start (libcudaq_rt.so.0: cannot open).
file(RELATIVE_PATH CUDAQ_RT_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" CUDAQ_RT_PC_TO_PREFIX "${CUDAQ_RT_PC_TO_PREFIX}")
file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/cudaq-rt.pc" @ONLY CONTENT [[
prefix=${pcfiledir}/@CUDAQ_RT_PC_TO_PREFIX@
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@

Name: cudaq-rt
Description: Load, link and serve CUDA device code packages (the C API of libcudaq_rt)
Version: @PROJECT_VERSION@
Cflags: -I${includedir}
Libs: -L${libdir} -Wl,-rpath,${libdir} -lcudaq_rt
]])
install(FILES "${CMAKE_BINARY_DIR}/cudaq-rt.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
