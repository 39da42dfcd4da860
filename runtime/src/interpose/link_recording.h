// Recordings: a link a program made through the nvJitLink API, written as a package (its inputs as
// blobs, its options and inputs as the manifest's recipe) for cudaq-rt-link to link again for
// other archs, ahead of time (link/recorded_link.h).
#pragma once

#include "base/signing.h"
#include "cudaq_rt/error.h"
#include "package/manifest.h"

#include <filesystem>
#include <span>
#include <string>

namespace cudaq_rt {

// NAME-<16 hex digits of the key>.cudaqpkg, NAME the program's, made a valid package name.
std::string recording_name(std::string_view program, const Digest &key);

// Writes the recording under `dir` (created where missing), atomically; `blobs[i]` is the bytes
// of `recipe.inputs[i]`. A recording of the same key already there is left as it is: one per
// distinct link. With a signer (CUDAQ_RT_SIGN_KEY), the recording is signed as it is written.
Status write_recording(const std::filesystem::path &dir, const LinkRecipe &recipe,
                       std::span<const std::string> blobs, const SigningKey *signer = nullptr);

} // namespace cudaq_rt
