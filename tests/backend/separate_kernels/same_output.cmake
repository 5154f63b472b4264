# TEQUANT_SEPARATE_HOST_KERNELS changes where the host kernels are compiled, never what they compute:
# the two builds of casts.cpp must print the same digests.
#   cmake -DHEADER_ONLY=<exe> -DSEPARATE=<exe> -P same_output.cmake
foreach(exe HEADER_ONLY SEPARATE)
  execute_process(COMMAND ${${exe}} RESULT_VARIABLE rc OUTPUT_VARIABLE out_${exe} ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${${exe}}: exit code ${rc}\n${out_${exe}}${err}")
  endif()
endforeach()
if(NOT out_HEADER_ONLY STREQUAL out_SEPARATE)
  message(FATAL_ERROR "the separate-kernels build differs:\n${out_HEADER_ONLY}\nvs\n${out_SEPARATE}")
endif()
string(REGEX MATCH "[0-9]+ casts" n "${out_SEPARATE}")
message("identical: ${n}")
