# Writes OUTPUT, a header defining CUDAQ_RT_SOURCE_REVISION as `git describe --always --dirty` of
# SOURCE_DIR ("unknown" outside a git checkout), rewriting it only when the revision changed so that
# a build at the same revision recompiles nothing. Run at every build (cmake -P), by the
# cudaq_rt_source_revision target.
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE failed ERROR_QUIET)
if(failed OR revision STREQUAL "")
  set(revision "unknown")
endif()
set(text "#define CUDAQ_RT_SOURCE_REVISION \"${revision}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
