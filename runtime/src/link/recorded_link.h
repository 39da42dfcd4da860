// cudaq-rt-link of a recording (a package whose manifest holds a recipe: a link a program made
// through the nvJitLink interposer, interpose/link_recording.h): for each arch, the recipe with its
// -arch replaced and nothing else changed, keyed exactly as the interposer keys that link on a GPU
// of that arch (api_link_key), from the cache or linked, and stored in the cache (local, and the
// remote one where it is writable) and, as link records, in the recording, so that
// `cudaq-rt-link --cache-push` can push them to a fleet's remote cache.
#pragma once

#include "link/link.h"

namespace cudaq_rt {

class Package;

// link_package's work for a recording.
Expected<LinkReport> link_recording(const Package &recording, const LinkOptions &options,
                                    const LinkCache &cache);

} // namespace cudaq_rt
