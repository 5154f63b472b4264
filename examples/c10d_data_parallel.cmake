# c10d_data_parallel (issue 20): libtorch FP8 data parallelism over Gloo with c10d_comm, run as a CTest
# test with 2 ranks (included by examples/CMakeLists.txt; built only when libtorch has c10d/Gloo).
if(TEQUANT_ENABLE_LIBTORCH)
  find_package(Torch QUIET)
  find_package(Gloo QUIET CONFIG)
  find_path(TEQUANT_C10D_GLOO_HEADER torch/csrc/distributed/c10d/ProcessGroupGloo.hpp HINTS ${TORCH_INCLUDE_DIRS})
  if(Torch_FOUND AND Gloo_FOUND AND TEQUANT_C10D_GLOO_HEADER)
    add_executable(c10d_data_parallel ${CMAKE_CURRENT_LIST_DIR}/c10d_data_parallel.cpp)
    target_link_libraries(c10d_data_parallel PRIVATE tequant::tequant tequant_warnings torch gloo)
    target_compile_definitions(c10d_data_parallel PRIVATE USE_C10D_GLOO)
    if(TEQUANT_BUILD_TESTS)
      add_test(NAME c10d_data_parallel_example COMMAND c10d_data_parallel --ranks 2 --steps 50)
      set_tests_properties(c10d_data_parallel_example PROPERTIES LABELS "c10d;libtorch;example" TIMEOUT 300 PROCESSORS 2
                           PASS_REGULAR_EXPRESSION "ok: 2 ranks, 50 steps")
    endif()
  else()
    message(STATUS "tequant: libtorch with c10d/Gloo not found; examples/c10d_data_parallel is not built")
  endif()
endif()
