# Relocatable device code with LTO-IR, the way every device-code target is built: here in the
# build tree, and in projects that use the installed package (cudaq-rtConfig.cmake includes this
# same file).
#
# CUDAQ_RT_DEVICE_ARCHS lists the SM numbers to build for (default 80). Each gets a relocatable
# cubin (sm_NN, for a plain device link) and LTO-IR (lto_NN, what cudaq-rt-link links): LTO-IR
# for one arch links for that GPU and every newer one, so 80 serves sm_80, sm_90, sm_100...
set(CUDAQ_RT_DEVICE_ARCHS "80" CACHE STRING "SM numbers device code is built for")

function(cudaq_rt_device_code_flags out)
  set(flags -rdc=true)
  foreach(arch IN LISTS CUDAQ_RT_DEVICE_ARCHS)
    list(APPEND flags "-gencode=arch=compute_${arch},code=[sm_${arch},lto_${arch}]")
  endforeach()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# Builds `target`'s .cu sources as relocatable device code with LTO-IR and links the device
# contract headers (cudaq_rt/exports.h, dispatch.h, ...). CUDA_ARCHITECTURES is turned off on
# the target: CUDAQ_RT_DEVICE_ARCHS is the one place the archs are chosen.
function(cudaq_rt_device_code target)
  cudaq_rt_device_code_flags(flags)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${flags}>)
  target_link_libraries(${target} PRIVATE cudaq-rt::headers)
  set(dlink)
  foreach(arch IN LISTS CUDAQ_RT_DEVICE_ARCHS)
    list(APPEND dlink "-arch=sm_${arch}")
  endforeach()
  target_link_options(${target} PRIVATE $<DEVICE_LINK:${dlink}>)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES OFF
                                             CUDA_SEPARABLE_COMPILATION ON
                                             CUDA_RESOLVE_DEVICE_SYMBOLS ON)
endfunction()
