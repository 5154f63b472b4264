# Activation recompute must not change the numerics: the main example's loss.csv (FP32 and FP8 losses
# and the update counts per step) must be byte-identical with --recompute none, reentrant and nested.
#   cmake -DEXE=<quickstart> -DOUT=<dir> -P same_losses.cmake
set(first "")
foreach(mode none reentrant nested)
  execute_process(COMMAND ${EXE} --quiet --steps 30 --recompute ${mode} --out ${OUT}/${mode} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "--recompute ${mode}: exit code ${rc}\n${out}${err}")
  endif()
  file(READ ${OUT}/${mode}/loss.csv csv)
  if(first STREQUAL "")
    set(first "${csv}")
  elseif(NOT csv STREQUAL first)
    message(FATAL_ERROR "loss.csv with --recompute ${mode} differs from --recompute none")
  endif()
endforeach()
message("loss.csv identical for --recompute none, reentrant, nested")
