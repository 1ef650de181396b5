# Kokkos 3.4 compiles every C++ file of a CUDA consumer through its nvcc_wrapper. Use the one
# installed by cmake/bootstrap.sh unless the user names a compiler (e.g. their own Kokkos 4.x).
include("${CMAKE_CURRENT_LIST_DIR}/deps_location.cmake")
if(NOT CMAKE_CXX_COMPILER)
  set(_zs_wrapper "${ZEROSYNC_DEPS_DIR}/install/cuda/bin/nvcc_wrapper")
  if(NOT EXISTS "${_zs_wrapper}")
    message(FATAL_ERROR "zerosync: the cuda preset needs Kokkos built for CUDA, expected "
      "'${_zs_wrapper}'. Run 'cmake/bootstrap.sh cuda' first, or configure with "
      "-DCMAKE_CXX_COMPILER=<your nvcc_wrapper> -DKokkos_ROOT=<your Kokkos CUDA install>.")
  endif()
  set(CMAKE_CXX_COMPILER "${_zs_wrapper}" CACHE FILEPATH "C++ compiler (Kokkos nvcc_wrapper)")
endif()
if(NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(ENV{PATH} "/usr/local/cuda/bin:$ENV{PATH}")
endif()
