# The libraries data/ (tokenizers) needs, as imported targets tapegrad_dep::pcre2,
# tapegrad_dep::sentencepiece and tapegrad_dep::utf8proc. Debian: libpcre2-dev,
# libsentencepiece-dev, libutf8proc-dev (scripts/install-deps.sh). On a machine without those
# packages, unpack them under <source>/.deps/sysroot (scripts/stage-text-deps.sh does it) or point
# CMAKE_PREFIX_PATH at where they are. Included by the build and by the installed package config
# (which first sets TG_TEXT_DEP_PREFIXES to where the build found them).
set(_tg_text_hints "${CMAKE_CURRENT_LIST_DIR}/../.deps/sysroot/usr" ${TG_TEXT_DEP_PREFIXES})
set(_tg_text_missing "")
foreach(dep pcre2 sentencepiece utf8proc)
  if(TARGET tapegrad_dep::${dep})
    continue()
  endif()
  if(dep STREQUAL "pcre2")
    set(_header pcre2.h)
    set(_names pcre2-8)
    set(_package libpcre2-dev)
  elseif(dep STREQUAL "sentencepiece")
    set(_header sentencepiece_processor.h)
    set(_names sentencepiece)
    set(_package libsentencepiece-dev)
  else()
    set(_header utf8proc.h)
    set(_names utf8proc)
    set(_package libutf8proc-dev)
  endif()
  find_path(TG_${dep}_INCLUDE_DIR ${_header} HINTS ${_tg_text_hints} PATH_SUFFIXES include)
  find_library(TG_${dep}_LIBRARY NAMES ${_names} HINTS ${_tg_text_hints}
               PATH_SUFFIXES lib lib/x86_64-linux-gnu lib/aarch64-linux-gnu)
  if(TG_${dep}_INCLUDE_DIR AND TG_${dep}_LIBRARY)
    add_library(tapegrad_dep::${dep} UNKNOWN IMPORTED)
    set_target_properties(tapegrad_dep::${dep} PROPERTIES IMPORTED_LOCATION "${TG_${dep}_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${TG_${dep}_INCLUDE_DIR}")
    get_filename_component(_prefix "${TG_${dep}_INCLUDE_DIR}" DIRECTORY)
    list(APPEND TG_TEXT_DEP_PREFIXES "${_prefix}")
  else()
    list(APPEND _tg_text_missing ${_package})
  endif()
endforeach()
if(_tg_text_missing)
  message(FATAL_ERROR "tapegrad's tokenizers need ${_tg_text_missing}: apt-get install ${_tg_text_missing} "
                      "(or run scripts/install-deps.sh; without packages, scripts/stage-text-deps.sh)")
endif()
