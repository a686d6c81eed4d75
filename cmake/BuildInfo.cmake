# Writes harness/build_info.h with the current git sha. Run at every build (not only at
# configure), so `kvgate --version` and the runs it records name the commit actually built;
# configure_file leaves the header untouched when nothing changed, so nothing recompiles then.
execute_process(COMMAND git rev-parse --short=12 HEAD
  WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE KVGATE_GIT_SHA
  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT KVGATE_GIT_SHA)
  set(KVGATE_GIT_SHA "unknown")
endif()
execute_process(COMMAND git status --porcelain --untracked-files=no
  WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE dirty ERROR_QUIET)
if(dirty)
  string(APPEND KVGATE_GIT_SHA "-dirty")
endif()
configure_file(${TEMPLATE} ${OUTPUT} @ONLY)
