# Writes OUTPUT (a header defining GEMMA4_GIT_SHA) from `git rev-parse` at build time, so the
# provenance in output files follows the commit that was built; "-dirty" marks uncommitted
# changes. GEMMA4_GIT_SHA in the environment overrides both: the GPU host's copy of the tree has a
# .git that does not follow the working tree.
# Usage: cmake -DSOURCE_DIR=... -DOUTPUT=... -P git_sha.cmake
set(sha "$ENV{GEMMA4_GIT_SHA}")
if(NOT sha)
  execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(sha AND NOT DEFINED ENV{GEMMA4_GIT_SHA})
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    set(sha "${sha}-dirty")
  endif()
endif()
if(NOT sha)
  set(sha unknown)
endif()
set(content "#pragma once\n#define GEMMA4_GIT_SHA \"${sha}\"\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE ${OUTPUT} "${content}")
endif()
