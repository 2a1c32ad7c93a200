# tg_find_optional_library(<NAME> <what> <header> <library names>...): a system library the CUDA
# backend uses when it is there. Declares the switch TG_<NAME> (AUTO: use it when found, ON:
# required, OFF: not used) and TG_<NAME>_ROOT (a folder with include/<header> and lib/, searched
# before the CUDA toolkit, e.g. a PyTorch nvidia-* wheel's), finds TG_<NAME>_INCLUDE_DIR and
# TG_<NAME>_LIBRARY, and sets TG_<NAME>_FOUND: whether both were found and the switch allows it.
macro(tg_find_optional_library name what header)
  set(TG_${name} AUTO CACHE STRING "${what}: AUTO (when found), ON or OFF")
  set_property(CACHE TG_${name} PROPERTY STRINGS AUTO ON OFF)
  set(TG_${name}_ROOT "" CACHE PATH "A folder with include/${header} and lib/ (e.g. a PyTorch nvidia-* wheel's)")
  set(TG_${name}_FOUND OFF)
  if(NOT TG_${name} STREQUAL "OFF")
    find_path(TG_${name}_INCLUDE_DIR ${header} HINTS ${TG_${name}_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
    find_library(TG_${name}_LIBRARY NAMES ${ARGN}
      HINTS ${TG_${name}_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR}/../lib)
    if(TG_${name}_INCLUDE_DIR AND TG_${name}_LIBRARY)
      set(TG_${name}_FOUND ON)
    elseif(TG_${name} STREQUAL "ON")
      message(FATAL_ERROR "TG_${name}=ON but ${header} / lib${ARGV3} were not found: set -DTG_${name}_ROOT=<folder with include/ and lib/>")
    endif()
  endif()
endmacro()
