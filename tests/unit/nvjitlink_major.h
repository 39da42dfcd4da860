// CUDA 13's nvJitLink as the interposer's tests name it: the soname, the wheel's directory, and the
// codes CUDA 13's header gives NULL_INPUT and OUTDATED_LIBRARY (real_nvjitlink.h).
#pragma once

#include "interpose/real_nvjitlink.h"

namespace test_majors {

inline const cudaq_rt::NvJitLinkMajor cuda13 = {13,
                                                0,
                                                "libnvJitLink.so.13",
                                                "nvidia/cu13/lib",
                                                NVJITLINK_ERROR_NULL_INPUT,
                                                NVJITLINK_ERROR_OUTDATED_LIBRARY};

} // namespace test_majors
