# libtorch_gpt: the GPT of examples/gpt on libtorch modules, tequant's quantized_linear and checkpoint
# (included by examples/CMakeLists.txt). One translation unit: libtorch compiles are slow.
if(TEQUANT_ENABLE_LIBTORCH)
  find_package(Torch QUIET)
  if(Torch_FOUND)
    add_executable(libtorch_gpt ${CMAKE_CURRENT_LIST_DIR}/libtorch_gpt.cpp)
    target_link_libraries(libtorch_gpt PRIVATE tequant::tequant tequant_warnings torch)
    target_compile_definitions(libtorch_gpt PRIVATE TEQUANT_GPT_CORPUS="${CMAKE_CURRENT_LIST_DIR}/gpt/data/corpus.txt")
    # --ranks / --rendezvous: data parallelism over c10d/Gloo, when libtorch has it
    find_package(Gloo QUIET CONFIG)
    find_path(TEQUANT_C10D_GLOO_HEADER torch/csrc/distributed/c10d/ProcessGroupGloo.hpp HINTS ${TORCH_INCLUDE_DIRS})
    if(Gloo_FOUND AND TEQUANT_C10D_GLOO_HEADER)
      target_link_libraries(libtorch_gpt PRIVATE gloo)
      target_compile_definitions(libtorch_gpt PRIVATE USE_C10D_GLOO TEQUANT_GPT_RANKS=1)
      set(_lt_gpt_ranks ON)
    else()
      target_compile_definitions(libtorch_gpt PRIVATE TEQUANT_GPT_RANKS=0)
      set(_lt_gpt_ranks OFF)
      message(STATUS "tequant: libtorch without c10d/Gloo; libtorch_gpt is built without --ranks")
    endif()
    if(TEQUANT_BUILD_TESTS)
      set(_lt_gpt_out ${CMAKE_CURRENT_BINARY_DIR}/libtorch_gpt_runs)
      # The test size: each run (FP32, then FP8) takes seconds on one core. Tests run side by side: one
      # torch thread each (libtorch's results also depend on its thread count).
      set(_lt_gpt_small --layers 2 --d-model 64 --heads 4 --context 64 --batch 16 --lr 1e-2 --quiet --threads 1)
      set(_lt_gpt_labels "integration;libtorch;example;gpt")

      # libtorch_gpt_test(<name> ARGS ... EXPECT re ... [REJECT re ...] [FILES f ...] [RC exit-code, default 0])
      function(libtorch_gpt_test name)
        tequant_example_test(${name} TARGET libtorch_gpt LABELS ${_lt_gpt_labels} TIMEOUT 300 ${ARGN})
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
        set(_format FP8)
        if(r STREQUAL nvfp4)
          set(_format NVFP4)
        endif()
        libtorch_gpt_test(libtorch_gpt_fp8_vs_fp32_${r}
          ARGS ${_lt_gpt_small} --sample 40 --steps 100 --recipe ${r} --out ${_lt_gpt_out}/${r}
          EXPECT "recipe=${r} boundary=engine recompute=reentrant" "within_3_percent=yes"
                 "sampled from the ${_format} model" ${_updates}
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

      if(_lt_gpt_ranks)
        # Several ranks over one Gloo process group (--ranks 2: two local processes). The time-out is short
        # so that a failure costs seconds; the ranks are single-threaded (PROCESSORS 2).
        set(_lt_gpt_labels "c10d;libtorch;gpt;example")
        set(_lt_gpt_ranks_small ${_lt_gpt_small} --sample 0 --fp8-only --timeout 10 --ranks 2)
        function(libtorch_gpt_ranks_test name rc)
          libtorch_gpt_test(${name} RC ${rc} ${ARGN})
          set_tests_properties(${name} PROPERTIES PROCESSORS 2)
        endfunction()
        # Delayed: bit-identical state and weights on both ranks at every step, one update each way per
        # step on every rank, losses within 1e-3 of one process over the same global batches (5.8e-5 on one
        # machine, 1.03e-4 on another: the BLAS kernels' rounding, amplified by FP8).
        libtorch_gpt_ranks_test(libtorch_gpt_ranks2_delayed 0
          ARGS ${_lt_gpt_ranks_small} --steps 20 --compare --out ${_lt_gpt_out}/ranks2_delayed
          EXPECT "summary: ranks=2 recipe=delayed boundary=engine state_identical=yes weights_identical=yes updates_1_1=yes"
                 "within_1e-3=yes" "FP8 state bit-identical on all ranks +20 of 20 steps"
          FILES ${_lt_gpt_out}/ranks2_delayed/loss.csv ${_lt_gpt_out}/ranks2_delayed/ranks.csv)
        # What the difference to one process is: 2 ranks make the same additions as one process that
        # accumulates 2 micro-batches of half the batch (the same sequences), and their loss.csv are equal.
        foreach(r delayed current)
          add_test(NAME libtorch_gpt_ranks2_same_as_micro_batches_${r}
                   COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:libtorch_gpt> -DOUT=${_lt_gpt_out}/ranks2_mb_${r}
                           "-DARGS=${_lt_gpt_small};--sample;0;--steps;20;--recipe;${r}"
                           "-DVARIANTS=--ranks,2,--batch,16,--timeout,10|--batch,8,--micro-batches,2"
                           -P ${PROJECT_SOURCE_DIR}/tests/gpt/same_losses.cmake)
          set_tests_properties(libtorch_gpt_ranks2_same_as_micro_batches_${r} PROPERTIES LABELS "${_lt_gpt_labels}"
                               TIMEOUT 300 PROCESSORS 2)
        endforeach()
        # Current scaling: each rank scales its half batch with that half's amax (nothing to reduce), one
        # process the whole batch with the whole batch's: the losses differ by ~1e-3, not 1e-4.
        libtorch_gpt_ranks_test(libtorch_gpt_ranks2_current 0
          ARGS ${_lt_gpt_ranks_small} --steps 10 --recipe current --compare --out ${_lt_gpt_out}/ranks2_current
          EXPECT "recipe=current boundary=engine state_identical=n/a weights_identical=yes" "within_1e-2=yes")
        # The other fixed boundaries: autocast (with the TCPStore rendezvous), scope (with 2 micro-batches).
        libtorch_gpt_ranks_test(libtorch_gpt_ranks2_autocast_tcp 0
          ARGS ${_lt_gpt_ranks_small} --steps 8 --boundary autocast --store tcp --out ${_lt_gpt_out}/ranks2_autocast
          EXPECT "boundary=autocast state_identical=yes weights_identical=yes updates_1_1=yes")
        libtorch_gpt_ranks_test(libtorch_gpt_ranks2_scope_micro_batches 0
          ARGS ${_lt_gpt_ranks_small} --steps 8 --boundary scope --micro-batches 2 --out ${_lt_gpt_out}/ranks2_scope
          EXPECT "boundary=scope state_identical=yes weights_identical=yes updates_1_1=yes")
        # Started torchrun-style: each rank by itself, rank 0 serving the TCPStore.
        add_test(NAME libtorch_gpt_ranks2_rendezvous_tcp
                 COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:libtorch_gpt> -DOUT=${_lt_gpt_out}/ranks2_tcp
                         "-DARGS=${_lt_gpt_small};--sample;0;--fp8-only;--timeout;20;--steps;6"
                         "-DEXPECT=summary: ranks=2 recipe=delayed boundary=engine state_identical=yes weights_identical=yes updates_1_1=yes"
                         -P ${PROJECT_SOURCE_DIR}/tests/gpt/rendezvous_tcp.cmake)
        set_tests_properties(libtorch_gpt_ranks2_rendezvous_tcp PROPERTIES LABELS "${_lt_gpt_labels}" TIMEOUT 300 PROCESSORS 2)
        # Rank 1 registers a module more at step 3: the layout check stops both ranks with a tequant: error.
        libtorch_gpt_ranks_test(libtorch_gpt_ranks2_diverge 1
          ARGS ${_lt_gpt_ranks_small} --steps 6 --debug-diverge 3 --out ${_lt_gpt_out}/ranks2_diverge
          EXPECT "rank 0, step 3: error: tequant: layout check" "rank 1, step 3: error: tequant: layout check"
                 "rank 0 exited with 1" "rank 1 exited with 1")
        # Rank 1 is killed mid-step: rank 0's next collective fails at once (its peer's sockets closed).
        libtorch_gpt_ranks_test(libtorch_gpt_ranks2_dead_rank 1
          ARGS ${_lt_gpt_ranks_small} --steps 6 --debug-die-at 3 --out ${_lt_gpt_out}/ranks2_dead
          EXPECT "rank 1 was killed by signal 9" "rank 0, step 3: error: tequant: c10d_comm::[a-z ]+ .*allreduce failed"
                 "rank 0 exited with 1")
        # Rank 1 stalls mid-step: rank 0 times out after --timeout 5 s, the launcher kills rank 1.
        libtorch_gpt_ranks_test(libtorch_gpt_ranks2_stalled_rank 1
          ARGS ${_lt_gpt_ranks_small} --steps 6 --debug-stall-at 3 --timeout 5 --out ${_lt_gpt_out}/ranks2_stall
          EXPECT "rank 0, step 3: error: tequant: c10d_comm::.*Timed out waiting 5000ms" "rank 0 exited with 1"
                 "rank 1 still running [0-9]+ s after a rank failed: killed")
        set_tests_properties(libtorch_gpt_ranks2_stalled_rank PROPERTIES TIMEOUT 120)
        # The global batch must split evenly.
        libtorch_gpt_ranks_test(libtorch_gpt_ranks_bad_batch 2
          ARGS ${_lt_gpt_small} --ranks 3 --out ${_lt_gpt_out}/ranks_bad
          EXPECT "--batch 16 is the global batch: it must be a multiple of the 3 ranks")
      endif()
    endif()
  else()
    message(STATUS "tequant: libtorch not found; examples/libtorch_gpt is not built (apt-get install libtorch-dev)")
  endif()
endif()
