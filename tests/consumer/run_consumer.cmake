# cmake -DSOURCE_DIR=... -DWORK_DIR=... -DMODE=find_package|add_subdirectory -DCXX=... -P run_consumer.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(_consumer ${CMAKE_CURRENT_LIST_DIR}/${MODE})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tequant consumer test (${MODE}) failed at: ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

if(NOT DEFINED WITH_CUDA)
  set(WITH_CUDA OFF)
endif()
if(MODE STREQUAL "find_package")
  # Without CUDA, find_package(tequant) must never need the CUDA toolkit; with it, COMPONENTS cuda
  # must import tequant::cuda.
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/tequant-build -DCMAKE_CXX_COMPILER=${CXX}
      -DTEQUANT_ENABLE_CUDA=${WITH_CUDA} -DTEQUANT_BUILD_TESTS=OFF -DTEQUANT_BUILD_EXAMPLES=OFF
      -DTEQUANT_ENABLE_MPI=OFF -DTEQUANT_ENABLE_LIBTORCH=OFF
      -DTEQUANT_INSTALL=ON -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/tequant-build)
  run(${CMAKE_COMMAND} -S ${_consumer} -B ${WORK_DIR}/consumer-build -DCMAKE_CXX_COMPILER=${CXX}
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DWITH_CUDA=${WITH_CUDA} -DCMAKE_CUDA_ARCHITECTURES=90)
else()
  run(${CMAKE_COMMAND} -S ${_consumer} -B ${WORK_DIR}/consumer-build -DCMAKE_CXX_COMPILER=${CXX}
      -DTEQUANT_SOURCE_DIR=${SOURCE_DIR})
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
run(${WORK_DIR}/consumer-build/consumer)
if(WITH_CUDA)
  run(${WORK_DIR}/consumer-build/two_cuda_units)
endif()
message(STATUS "tequant consumer (${MODE}) built and ran")
