# libtorch_gpt: the GPT of examples/gpt on libtorch modules, tequant's quantized_linear and checkpoint
# (included by examples/CMakeLists.txt). One translation unit: libtorch compiles are slow.
if(TEQUANT_ENABLE_LIBTORCH)
  find_package(Torch QUIET)
  if(Torch_FOUND)
    add_executable(libtorch_gpt ${CMAKE_CURRENT_LIST_DIR}/libtorch_gpt.cpp)
    target_link_libraries(libtorch_gpt PRIVATE tequant::tequant tequant_warnings torch)
    target_compile_definitions(libtorch_gpt PRIVATE TEQUANT_GPT_CORPUS="${CMAKE_CURRENT_LIST_DIR}/gpt/data/corpus.txt")
    if(TEQUANT_BUILD_TESTS)
      set(_lt_gpt_out ${CMAKE_CURRENT_BINARY_DIR}/libtorch_gpt_runs)
      # The test size: each run (FP32, then FP8) takes seconds on one core. Tests run side by side: one
      # torch thread each (libtorch's results also depend on its thread count).
      set(_lt_gpt_small --layers 2 --d-model 64 --heads 4 --context 64 --batch 16 --lr 1e-2 --quiet --threads 1)
      set(_lt_gpt_labels "integration;libtorch;example;gpt")

      # libtorch_gpt_test(<name> ARGS ... EXPECT re ... [REJECT re ...] [FILES f ...])
      function(libtorch_gpt_test name)
        cmake_parse_arguments(G "" "" "ARGS;EXPECT;REJECT;FILES" ${ARGN})
        list(JOIN G_ARGS "|" args)
        list(JOIN G_EXPECT "|" expect)
        list(JOIN G_REJECT "|" reject)
        list(JOIN G_FILES "|" files)
        add_test(NAME ${name}
                 COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:libtorch_gpt>|${args}" -DEXPECT_RC=0 "-DEXPECT=${expect}"
                         "-DREJECT=${reject}" "-DFILES=${files}" -P ${PROJECT_SOURCE_DIR}/tests/examples_check/run_example.cmake)
        set_tests_properties(${name} PROPERTIES LABELS "${_lt_gpt_labels}" TIMEOUT 300)
      endfunction()

      # FP8 (and NVFP4) lands within 3% of FP32 with every recipe; the stateful recipes get exactly one
      # forward and one backward update per step (libtorch's engine runs the flush in a final callback;
      # NVFP4's updates are empty, its state is the gradients' random streams).
      foreach(r delayed current mxfp8 block nvfp4)
        if(r STREQUAL delayed OR r STREQUAL nvfp4)
          set(_updates "updates_1_1=yes" "1/1 on 100 steps")
        else()
          set(_updates "updates_1_1=n/a")
        endif()
        libtorch_gpt_test(libtorch_gpt_fp8_vs_fp32_${r}
          ARGS ${_lt_gpt_small} --sample 40 --steps 100 --recipe ${r} --out ${_lt_gpt_out}/${r}
          EXPECT "recipe=${r} boundary=engine recompute=reentrant" "within_3_percent=yes" "sampled from the FP8 model"
                 ${_updates}
          FILES ${_lt_gpt_out}/${r}/loss.csv)
      endforeach()

      # Recompute replays with the original forward's scales: byte-identical FP8 loss.csv.
      add_test(NAME libtorch_gpt_recompute_identical
               COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:libtorch_gpt> -DOUT=${_lt_gpt_out}/recompute
                       "-DARGS=${_lt_gpt_small};--sample;0;--steps;20;--eval-every;5"
                       "-DVARIANTS=--recompute,none|--recompute,reentrant|--recompute,nested"
                       -P ${PROJECT_SOURCE_DIR}/tests/gpt/same_losses.cmake)
      set_tests_properties(libtorch_gpt_recompute_identical PROPERTIES LABELS "${_lt_gpt_labels}" TIMEOUT 300)

      # Micro-batches in one backward_scope, nested checkpoints: still one update each way per step.
      libtorch_gpt_test(libtorch_gpt_micro_batches_scope_nested
        ARGS ${_lt_gpt_small} --sample 0 --fp8-only --steps 8 --micro-batches 2 --boundary scope --recompute nested
             --out ${_lt_gpt_out}/mb_scope
        EXPECT "updates_1_1=yes" "1/1 on 8 steps")
      # TE's old rule: the replayed blocks own the backward update too.
      libtorch_gpt_test(libtorch_gpt_first_module
        ARGS ${_lt_gpt_small} --sample 0 --fp8-only --steps 8 --boundary first-module --out ${_lt_gpt_out}/first
        EXPECT "updates_1_1=no" "first module owns" REJECT "max_backward_updates_per_step=[01][^0-9]")
    endif()
  else()
    message(STATUS "tequant: libtorch not found; examples/libtorch_gpt is not built (apt-get install libtorch-dev)")
  endif()
endif()
