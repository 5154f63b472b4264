# gpt_mpi on N ranks must write the same loss.csv, byte for byte, as gpt in one process with N
# micro-batches of batch/N sequences (the same windows, the same amaxes, the same gradient sums).
#   cmake -DMPIEXEC=<mpiexec|-n> -DMPIFLAGS=<flag|...> -DGPT=<gpt> -DGPT_MPI=<gpt_mpi> -DRANKS=<n>
#         -DBATCH=<global batch> -DOUT=<dir> -DARGS=<a|b|...> [-DMPI_ARGS=<gpt_mpi's own flags>]
#         -P ranks_identical.cmake
string(REPLACE "|" ";" mpiexec "${MPIEXEC}")
string(REPLACE "|" ";" mpiflags "${MPIFLAGS}")
string(REPLACE "|" ";" ARGS "${ARGS}")
string(REPLACE "|" ";" MPI_ARGS "${MPI_ARGS}")
math(EXPR per_rank "${BATCH} / ${RANKS}")
execute_process(COMMAND ${GPT} ${ARGS} --fp8-only --batch ${per_rank} --micro-batches ${RANKS} --out ${OUT}/one
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpt: exit code ${rc}\n${out}${err}")
endif()
execute_process(COMMAND ${mpiexec} ${RANKS} ${mpiflags} ${GPT_MPI} ${ARGS} ${MPI_ARGS} --fp8-only --batch ${BATCH} --out ${OUT}/ranks
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpt_mpi: exit code ${rc}")
endif()
if(NOT out MATCHES "weights_identical=yes")
  message(FATAL_ERROR "the ranks' weights differed")
endif()
file(READ ${OUT}/one/loss.csv one)
file(READ ${OUT}/ranks/loss.csv ranks)
if(NOT one STREQUAL ranks)
  message(FATAL_ERROR "loss.csv of ${RANKS} ranks differs from one process with ${RANKS} micro-batches:\n${one}\n---\n${ranks}")
endif()
message("loss.csv identical: ${RANKS} ranks = 1 process with ${RANKS} micro-batches of ${per_rank}")
