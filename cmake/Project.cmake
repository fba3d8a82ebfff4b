# Project-wide compile settings applied to attnzoo's own targets (never to third-party code).
include_guard(GLOBAL)

# attnzoo_target_defaults(<target>): C++17, -Wall -Wextra (errors under ATTNZOO_WERROR), and the
# repository root on the include path so that headers are included as "layers/attention.h".
function(attnzoo_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  get_target_property(type ${target} TYPE)
  set(scope PUBLIC)
  if(type STREQUAL "EXECUTABLE")
    set(scope PRIVATE)
  endif()
  target_include_directories(${target} ${scope} ${PROJECT_SOURCE_DIR})
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${ATTNZOO_WERROR}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra>)
endfunction()
