# Relocatable device code with LTO-IR, the way every device-code target is built: here in the
# build tree, and in projects that use the installed package (cudaq-rtConfig.cmake includes this
# same file).
#
# CUDAQ_RT_DEVICE_ARCHS lists the SM numbers to build for (default 80). Each gets a relocatable
# cubin (sm_NN, for a plain device link) and LTO-IR (lto_NN, what cudaq-rt-link links): LTO-IR
# for one arch links for that GPU and every newer one, so 80 serves sm_80, sm_90, sm_100...
set(CUDAQ_RT_DEVICE_ARCHS "80" CACHE STRING "SM numbers device code is built for")

function(cudaq_rt_device_code_flags out)
  set(archs ${CUDAQ_RT_DEVICE_ARCHS})
  if(ARGN)
    set(archs ${ARGN})
  endif()
  set(flags -rdc=true)
  foreach(arch IN LISTS archs)
    list(APPEND flags "-gencode=arch=compute_${arch},code=[sm_${arch},lto_${arch}]")
  endforeach()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# Builds `target`'s .cu sources as relocatable device code with LTO-IR and links the device
# contract headers (cudaq_rt/exports.h, dispatch.h, ...). CUDA_ARCHITECTURES is turned off on
# the target: CUDAQ_RT_DEVICE_ARCHS is the one place the archs are chosen, unless the call names
# its own (`cudaq_rt_device_code(target ARCHS 80 90)`: code that has a path for a newer GPU, which
# nvJitLink then takes from the newest LTO-IR the target GPU can run).
function(cudaq_rt_device_code target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "ARCHS")
  set(archs ${CUDAQ_RT_DEVICE_ARCHS})
  if(arg_ARCHS)
    set(archs ${arg_ARCHS})
  endif()
  cudaq_rt_device_code_flags(flags ${archs})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${flags}>)
  target_link_libraries(${target} PRIVATE cudaq-rt::headers)
  # The device link of the target's own whole-program image takes one -arch (nvcc keeps only the
  # last of several, with a warning; CMake splits a -gencode's comma): the first arch. What
  # cudaq-rt links is the relocatable code, every arch of it.
  list(GET archs 0 first)
  target_link_options(${target} PRIVATE $<DEVICE_LINK:-arch=sm_${first}>)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES OFF
                                             CUDA_SEPARABLE_COMPILATION ON
                                             CUDA_RESOLVE_DEVICE_SYMBOLS ON)
endfunction()
