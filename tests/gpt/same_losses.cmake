# The GPT's FP8 loss.csv (train and validation losses, updates per step) must be byte-identical with
# --recompute none, reentrant and nested.
#   cmake -DEXE=<gpt> -DOUT=<dir> -DARGS=<a;b;...> -P same_losses.cmake
set(first "")
foreach(mode none reentrant nested)
  execute_process(COMMAND ${EXE} ${ARGS} --fp8-only --steps 30 --eval-every 5 --recompute ${mode} --out ${OUT}/${mode}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "--recompute ${mode}: exit code ${rc}\n${out}${err}")
  endif()
  if(NOT out MATCHES "updates_1_1=yes")
    message(FATAL_ERROR "--recompute ${mode}: not 1/1 updates per step\n${out}")
  endif()
  file(READ ${OUT}/${mode}/loss.csv csv)
  if(first STREQUAL "")
    set(first "${csv}")
  elseif(NOT csv STREQUAL first)
    message(FATAL_ERROR "loss.csv with --recompute ${mode} differs from --recompute none")
  endif()
endforeach()
message("FP8 loss.csv identical for --recompute none, reentrant, nested:\n${first}")
