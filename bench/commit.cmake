# Writes OUT (bench_commit.h): TG_BENCH_COMMIT, the commit the benchmarks are built from ("-dirty"
# when tracked files differ from it; "unknown" outside a git checkout); $TG_COMMIT, when set, wins. Run at every build, and the
# file is rewritten only when the value changes, so the rows name the code that ran.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=7 HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(DEFINED ENV{TG_COMMIT})  # a copy of the tree whose .git is stale or missing (the GPU machine's)
  set(commit "$ENV{TG_COMMIT}")
elseif(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no OUTPUT_VARIABLE changes
                  ERROR_QUIET)
  if(NOT changes STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "#pragma once\n#define TG_BENCH_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
