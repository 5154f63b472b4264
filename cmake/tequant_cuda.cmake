# tequant::cuda — included only when TEQUANT_ENABLE_CUDA is ON.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

add_library(tequant_cuda INTERFACE)
add_library(tequant::cuda ALIAS tequant_cuda)
set_target_properties(tequant_cuda PROPERTIES EXPORT_NAME cuda)
file(GLOB_RECURSE TEQUANT_CUDA_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/tequant/*.cuh)
target_sources(tequant_cuda INTERFACE FILE_SET HEADERS BASE_DIRS include FILES ${TEQUANT_CUDA_HEADERS})
target_link_libraries(tequant_cuda INTERFACE tequant::tequant CUDA::cudart)
if(TARGET CUDA::nvtx3)
  target_link_libraries(tequant_cuda INTERFACE CUDA::nvtx3)
endif()
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.25.2)
  target_compile_features(tequant_cuda INTERFACE cuda_std_20)
else()  # CMake <= 3.25.1 cannot spell C++20 for nvcc
  target_compile_options(tequant_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
endif()
target_compile_options(tequant_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)

# NCCL ships with the toolkit but has no CMake config or pkg-config file.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND NOT TARGET tequant_nccl_lib)
  add_library(tequant_nccl_lib UNKNOWN IMPORTED)
  set_target_properties(tequant_nccl_lib PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
