# Two ranks of libtorch_gpt started separately, torchrun-style: rank 1 with --rendezvous tcp://HOST:PORT
# --rank 1 --world 2, rank 0 with --rendezvous env (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); rank 0
# serves the TCPStore. Both run at once (execute_process runs its commands side by side; rank 1's
# stdout goes to rank 0's stdin, which nobody reads).
#   cmake -DEXE=<libtorch_gpt> -DOUT=<dir> -DARGS=<a;b;...> [-DEXPECT=<regex>] -P rendezvous_tcp.cmake
string(RANDOM LENGTH 4 ALPHABET 0123456789 r)
math(EXPR port "20000 + ${r}")  # a port that other tests are unlikely to hold at the same moment
execute_process(
  COMMAND ${EXE} ${ARGS} --rendezvous tcp://127.0.0.1:${port} --rank 1 --world 2 --address 127.0.0.1 --out ${OUT}/1
  COMMAND ${CMAKE_COMMAND} -E env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=${port}
          ${EXE} ${ARGS} --rendezvous env --address 127.0.0.1 --out ${OUT}/0
  RESULTS_VARIABLE rcs OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rcs STREQUAL "0;0")
  message(FATAL_ERROR "exit codes ${rcs} (rank 1; rank 0), expected 0;0")
endif()
if(EXPECT AND NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "rank 0's output does not match '${EXPECT}'")
endif()
