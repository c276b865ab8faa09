# fast_llm_library(NAME SOURCES ... [CUDA_SOURCES ...] [CPU_ONLY_SOURCES ...] DEPENDS ...)
#
# One shared library per folder of src/fast_llm. CUDA_SOURCES are compiled only with FAST_LLM_CUDA;
# CPU_ONLY_SOURCES (the stubs that stand in for the CUDA backend) only without it.
function(fast_llm_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;CUDA_SOURCES;CPU_ONLY_SOURCES;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  set(sources ${ARG_SOURCES})
  if(FAST_LLM_CUDA)
    list(APPEND sources ${ARG_CUDA_SOURCES})
  else()
    list(APPEND sources ${ARG_CPU_ONLY_SOURCES})
  endif()
  add_library(fast_llm_${name} SHARED ${sources})
  add_library(fast_llm::${name} ALIAS fast_llm_${name})
  target_include_directories(fast_llm_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(fast_llm_${name} PUBLIC ${ARG_DEPENDS} PRIVATE ${ARG_PRIVATE_DEPENDS})
  if(FAST_LLM_CUDA)
    set_target_properties(fast_llm_${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
                                                      CUDA_RUNTIME_LIBRARY Shared)
    target_compile_options(fast_llm_${name} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda -lineinfo>)
  endif()
endfunction()

# fast_llm_test(NAME SOURCES ... DEPENDS ... [LABELS ...])
function(fast_llm_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPENDS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  if(NOT ARG_LABELS)
    set(ARG_LABELS cpu)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 900)
  fast_llm_test_environment(${name})
endfunction()

# What a test needs in its environment: the symbolizer of sanitizer reports, in a sanitizer build that found one.
function(fast_llm_test_environment test)
  if(FAST_LLM_SANITIZE AND FAST_LLM_SYMBOLIZER)
    set_tests_properties(${test} PROPERTIES ENVIRONMENT "ASAN_SYMBOLIZER_PATH=${FAST_LLM_SYMBOLIZER}")
  endif()
endfunction()
