# Packing and linking as build steps: cudaq_rt_add_package() and cudaq_rt_add_dispatch_kernel().
#
# Used from the build tree (cmake/Install.cmake includes it) and from projects that call
# find_package(cudaq-rt) (cudaq-rtConfig.cmake includes the installed copy). Both see the tools
# as cudaq-rt::pack and cudaq-rt::link, and the device-code helpers of CudaDeviceCode.cmake.
#
# The same file is the build step itself, run as `cmake -P` (the block at the end): CMake has no
# portable way to say "this directory unless the environment names another" in a custom command,
# and a step whose link fails must not leave a fresh manifest.json behind, or the next build
# would take the half-made package for an up-to-date one.

if(NOT CMAKE_SCRIPT_MODE_FILE)

# cudaq_rt_add_dispatch_kernel(TARGET app SOURCE kernel.cu [more.cu ...])
#
# Builds a custom dispatch kernel (an extern "C" __global__ kernel marked with
# CUDAQ_RT_EXPORT_DISPATCH_KERNEL) as relocatable device code with LTO-IR, in a static library
# <app>_dispatch_kernel of its own, and records it on `app` (property
# CUDAQ_RT_DISPATCH_KERNEL) so that cudaq_rt_add_package() packs it with --dispatcher.
# cudaq-rt-pack gives each input file one role, so the kernel must not be linked into `app`:
# its container would be taken for application code. The library is not device-linked: the
# bridge hooks it calls are resolved only by cudaq-rt-link.
function(cudaq_rt_add_dispatch_kernel)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "TARGET" "SOURCE")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_TARGET OR NOT arg_SOURCE)
    message(FATAL_ERROR "usage: cudaq_rt_add_dispatch_kernel(TARGET app SOURCE kernel.cu ...)")
  endif()
  if(NOT TARGET ${arg_TARGET})
    message(FATAL_ERROR "cudaq_rt_add_dispatch_kernel: no target '${arg_TARGET}'")
  endif()
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST languages)
    message(FATAL_ERROR "cudaq_rt_add_dispatch_kernel: enable the CUDA language first "
                        "(project(... LANGUAGES CXX CUDA))")
  endif()
  set(kernel ${arg_TARGET}_dispatch_kernel)
  if(TARGET ${kernel})
    message(FATAL_ERROR "cudaq_rt_add_dispatch_kernel: '${arg_TARGET}' has a dispatch kernel "
                        "already; put every source in one call")
  endif()
  add_library(${kernel} STATIC ${arg_SOURCE})
  cudaq_rt_device_code(${kernel})
  set_target_properties(${kernel} PROPERTIES CUDA_RESOLVE_DEVICE_SYMBOLS OFF
                                             POSITION_INDEPENDENT_CODE ON)
  get_target_property(made ${arg_TARGET} CUDAQ_RT_PACKAGE_STEP_MADE)
  if(made)
    message(FATAL_ERROR "cudaq_rt_add_dispatch_kernel: the package step of '${arg_TARGET}' is "
                        "made already: call this in the directory that calls cudaq_rt_add_package")
  endif()
  set_target_properties(${arg_TARGET} PROPERTIES CUDAQ_RT_DISPATCH_KERNEL ${kernel})
endfunction()

# cudaq_rt_add_package(TARGET app [NAME name] [BRIDGE loopback] [ARCHS sm_80 sm_90 ...]
#                      [OUTPUT dir] [ALIAS wire=handler ...] [LTO per-tu|whole]
#                      [DISPATCHER builtin|warp|kernel] [LINK_OPTIONS opt ...]
#                      [JOBS n] [JOB_POOL pool])
#
# After `app` links, packs its device code (and its dispatch kernel, if
# cudaq_rt_add_dispatch_kernel() gave it one) into <OUTPUT>/<NAME>.cudaqpkg and links it for
# ARCHS with BRIDGE's device hooks. NAME defaults to the target's name, BRIDGE to loopback, ARCHS
# to sm_80, OUTPUT to the current binary directory. ALIAS maps wire names to handlers
# (cudaq-rt-pack --alias), LTO, DISPATCHER and LINK_OPTIONS are cudaq-rt-link's --lto,
# --dispatcher and -X (nvJitLink options, recorded in the key), JOBS its -j. JOB_POOL runs the
# step in a Ninja job pool of the project's (JOB_POOLS), so that links share the machine with
# the rest of the build: a pool of N with JOBS 1 runs N links at once.
# The step reruns only when `app`, its dispatch kernel, the tools, the bridge library or these
# options change; a custom target <app>_cudaqpkg (part of ALL) drives it. Links go through
# $ENV{CUDAQ_RT_CACHE_DIR} when it is set at build time, else through a cache in the build tree
# (CUDAQ_RT_PACKAGE_CACHE_DIR).
function(cudaq_rt_add_package)
  cmake_parse_arguments(PARSE_ARGV 0 arg ""
                        "TARGET;NAME;BRIDGE;OUTPUT;LTO;DISPATCHER;JOBS;JOB_POOL"
                        "ARCHS;ALIAS;LINK_OPTIONS")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_TARGET)
    message(FATAL_ERROR "usage: cudaq_rt_add_package(TARGET app [NAME name] [BRIDGE loopback] "
                        "[ARCHS sm_80 sm_90 ...] [OUTPUT dir] [ALIAS wire=handler ...] "
                        "[LTO per-tu|whole] [DISPATCHER builtin|warp|kernel] "
                        "[LINK_OPTIONS opt ...] [JOBS n] [JOB_POOL pool])")
  endif()
  foreach(a IN LISTS arg_ALIAS)
    if(NOT a MATCHES "^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z_][A-Za-z0-9_]*$")
      message(FATAL_ERROR "cudaq_rt_add_package: ALIAS takes wire_name=handler, not '${a}'")
    endif()
  endforeach()
  if(arg_LTO AND NOT arg_LTO MATCHES "^(per-tu|whole)$")
    message(FATAL_ERROR "cudaq_rt_add_package: LTO is per-tu or whole, not '${arg_LTO}'")
  endif()
  if(arg_JOBS AND NOT arg_JOBS MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "cudaq_rt_add_package: JOBS is a positive number, not '${arg_JOBS}'")
  endif()
  if(arg_JOB_POOL AND NOT CMAKE_GENERATOR MATCHES "Ninja")
    message(WARNING "cudaq_rt_add_package: JOB_POOL works with the Ninja generators only; "
                    "'${CMAKE_GENERATOR}' ignores it")
  endif()
  set(app ${arg_TARGET})
  if(NOT TARGET ${app})
    message(FATAL_ERROR "cudaq_rt_add_package: no target '${app}'")
  endif()
  if(TARGET ${app}_cudaqpkg)
    message(FATAL_ERROR "cudaq_rt_add_package: '${app}' is packaged already")
  endif()
  set(name ${app})
  if(arg_NAME)
    set(name ${arg_NAME})
  endif()
  if(NOT name MATCHES "^[A-Za-z0-9._-]+$")
    message(FATAL_ERROR "cudaq_rt_add_package: '${name}' is not a valid package name "
                        "(letters, digits, '.', '_', '-'): give NAME")
  endif()
  set(bridge loopback)
  if(arg_BRIDGE)
    set(bridge ${arg_BRIDGE})
  endif()
  set(archs sm_80)
  if(arg_ARCHS)
    set(archs ${arg_ARCHS})
  endif()
  foreach(arch IN LISTS archs)
    if(NOT arch MATCHES "^sm_[0-9]+[af]?$")
      message(FATAL_ERROR "cudaq_rt_add_package: ARCHS takes sm_NN[a|f], not '${arch}'")
    endif()
  endforeach()
  list(JOIN archs "," arch_list)
  set(output "${CMAKE_CURRENT_BINARY_DIR}")
  if(arg_OUTPUT)
    cmake_path(ABSOLUTE_PATH arg_OUTPUT BASE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}"
               OUTPUT_VARIABLE output)
  endif()
  if(NOT CUDAQ_RT_PACKAGE_CACHE_DIR)
    set(CUDAQ_RT_PACKAGE_CACHE_DIR "${CMAKE_BINARY_DIR}/cudaq-rt-cache" CACHE PATH
        "Link cache of cudaq_rt_add_package() steps, unless CUDAQ_RT_CACHE_DIR is set")
  endif()

  # The bridge's device hooks go into every link, so its library is an input of the step.
  set(bridge_file)
  if(TARGET cudaq_rt_bridge_${bridge})
    set(bridge_file "$<TARGET_FILE:cudaq_rt_bridge_${bridge}>")
  elseif(bridge MATCHES "/")
    set(bridge_file "${bridge}")
  elseif(CUDAQ_RT_BRIDGE_DIR AND EXISTS "${CUDAQ_RT_BRIDGE_DIR}/libcudaq_rt_bridge_${bridge}.so")
    set(bridge_file "${CUDAQ_RT_BRIDGE_DIR}/libcudaq_rt_bridge_${bridge}.so")
  endif()

  add_custom_target(${app}_cudaqpkg ALL)
  # Lists travel to the step joined by '|', which no option or alias holds (';' would split
  # them on the command line).
  list(JOIN arg_ALIAS "|" aliases)
  list(JOIN arg_LINK_OPTIONS "|" link_options)
  set_target_properties(${app}_cudaqpkg PROPERTIES
    CUDAQ_RT_STEP_NAME "${name}" CUDAQ_RT_STEP_BRIDGE "${bridge}"
    CUDAQ_RT_STEP_BRIDGE_FILE "${bridge_file}" CUDAQ_RT_STEP_ARCHS "${arch_list}"
    CUDAQ_RT_STEP_OUTPUT "${output}" CUDAQ_RT_STEP_ALIASES "${aliases}"
    CUDAQ_RT_STEP_LTO "${arg_LTO}" CUDAQ_RT_STEP_DISPATCHER_NAME "${arg_DISPATCHER}"
    CUDAQ_RT_STEP_LINK_OPTIONS "${link_options}" CUDAQ_RT_STEP_JOBS "${arg_JOBS}"
    CUDAQ_RT_STEP_JOB_POOL "${arg_JOB_POOL}")
  set_target_properties(${app} PROPERTIES CUDAQ_RT_PACKAGE_DIR "${output}/${name}.cudaqpkg")
  # Made at the end of the directory, so that a dispatch kernel added after this call is seen.
  cmake_language(EVAL CODE "cmake_language(DEFER CALL _cudaq_rt_package_step [[${app}]])")
endfunction()

function(_cudaq_rt_package_step app)
  set(step ${app}_cudaqpkg)
  foreach(p NAME BRIDGE BRIDGE_FILE ARCHS OUTPUT ALIASES LTO DISPATCHER_NAME LINK_OPTIONS JOBS
            JOB_POOL)
    get_target_property(${p} ${step} CUDAQ_RT_STEP_${p})
  endforeach()
  set(pool)
  if(JOB_POOL)
    set(pool JOB_POOL "${JOB_POOL}")
  endif()
  # Makefile generators pass make's jobserver to the step (cudaq-rt-link takes its tokens) where
  # CMake can say so (3.28); Ninja has JOB_POOL.
  if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.28)
    list(APPEND pool JOB_SERVER_AWARE ON)
  endif()
  if(NOT BRIDGE_FILE)
    set(BRIDGE_FILE)
  endif()
  # Unset, the property reads as "kernel-NOTFOUND", which must not become a dependency.
  get_target_property(kernel ${app} CUDAQ_RT_DISPATCH_KERNEL)
  set(dispatcher)
  if(kernel)
    set(dispatcher "$<TARGET_FILE:${kernel}>")
  else()
    set(kernel)
  endif()
  set(manifest "${OUTPUT}/${NAME}.cudaqpkg/manifest.json")
  add_custom_command(
    OUTPUT "${manifest}"
    COMMAND "${CMAKE_COMMAND}"
            "-DCUDAQ_RT_PACK=$<TARGET_FILE:cudaq-rt::pack>"
            "-DCUDAQ_RT_LINK=$<TARGET_FILE:cudaq-rt::link>"
            "-DCUDAQ_RT_STEP_INPUT=$<TARGET_FILE:${app}>"
            "-DCUDAQ_RT_STEP_DISPATCHER=${dispatcher}"
            "-DCUDAQ_RT_STEP_NAME=${NAME}"
            "-DCUDAQ_RT_STEP_OUTPUT=${OUTPUT}"
            "-DCUDAQ_RT_STEP_BRIDGE=${BRIDGE}"
            "-DCUDAQ_RT_STEP_ARCHS=${ARCHS}"
            "-DCUDAQ_RT_STEP_CACHE_DIR=${CUDAQ_RT_PACKAGE_CACHE_DIR}"
            "-DCUDAQ_RT_STEP_ALIASES=${ALIASES}"
            "-DCUDAQ_RT_STEP_LTO=${LTO}"
            "-DCUDAQ_RT_STEP_DISPATCHER_NAME=${DISPATCHER_NAME}"
            "-DCUDAQ_RT_STEP_LINK_OPTIONS=${LINK_OPTIONS}"
            "-DCUDAQ_RT_STEP_JOBS=${JOBS}"
            -P "${CMAKE_CURRENT_FUNCTION_LIST_FILE}"
    DEPENDS ${app} "$<TARGET_FILE:${app}>" ${kernel} ${dispatcher} ${BRIDGE_FILE}
            "$<TARGET_FILE:cudaq-rt::pack>" "$<TARGET_FILE:cudaq-rt::link>"
            "${CMAKE_CURRENT_FUNCTION_LIST_FILE}"
    COMMENT "Packing ${app} into ${NAME}.cudaqpkg and linking it for ${ARCHS}"
    ${pool}
    VERBATIM)
  target_sources(${step} PRIVATE "${manifest}")
  set_target_properties(${app} PROPERTIES CUDAQ_RT_PACKAGE_STEP_MADE ON)
endfunction()

return()
endif()

# The build step: cmake -P CudaqRtPackage.cmake with the CUDAQ_RT_STEP_* variables above.
set(package "${CUDAQ_RT_STEP_OUTPUT}/${CUDAQ_RT_STEP_NAME}.cudaqpkg")
if("$ENV{CUDAQ_RT_CACHE_DIR}" STREQUAL "")
  set(ENV{CUDAQ_RT_CACHE_DIR} "${CUDAQ_RT_STEP_CACHE_DIR}")
endif()
file(MAKE_DIRECTORY "${CUDAQ_RT_STEP_OUTPUT}")

set(pack_args "${CUDAQ_RT_STEP_INPUT}")
if(CUDAQ_RT_STEP_DISPATCHER)
  list(APPEND pack_args --dispatcher "${CUDAQ_RT_STEP_DISPATCHER}")
endif()
string(REPLACE "|" ";" aliases "${CUDAQ_RT_STEP_ALIASES}")
foreach(a IN LISTS aliases)
  list(APPEND pack_args --alias "${a}")
endforeach()
set(link_args)
if(CUDAQ_RT_STEP_LTO)
  list(APPEND link_args --lto "${CUDAQ_RT_STEP_LTO}")
endif()
if(CUDAQ_RT_STEP_DISPATCHER_NAME)
  list(APPEND link_args --dispatcher "${CUDAQ_RT_STEP_DISPATCHER_NAME}")
endif()
if(CUDAQ_RT_STEP_JOBS)
  list(APPEND link_args -j "${CUDAQ_RT_STEP_JOBS}")
endif()
string(REPLACE "|" ";" link_options "${CUDAQ_RT_STEP_LINK_OPTIONS}")
foreach(o IN LISTS link_options)
  list(APPEND link_args "--Xnvjitlink=${o}")
endforeach()
execute_process(COMMAND "${CUDAQ_RT_PACK}" ${pack_args} --name "${CUDAQ_RT_STEP_NAME}"
                        --output "${CUDAQ_RT_STEP_OUTPUT}" --force
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE_RECURSE "${package}")
  message(FATAL_ERROR "cudaq-rt-pack failed (${rc}): no package ${package}")
endif()
execute_process(COMMAND "${CUDAQ_RT_LINK}" "${package}" --arch "${CUDAQ_RT_STEP_ARCHS}"
                        --bridge "${CUDAQ_RT_STEP_BRIDGE}" ${link_args}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE_RECURSE "${package}")
  message(FATAL_ERROR "cudaq-rt-link failed (${rc}): no package ${package}")
endif()
