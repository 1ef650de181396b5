# Each installed header compiled on its own (and twice in one file, for its include guard), so a
# header that leans on something its includer happened to include first fails the build here
# rather than in a user's project. tools/check_std_includes.py checks the standard headers, which
# Kokkos 3.4's own headers would mask here.
set(ZEROSYNC_HEADER_CHECK_DIR "${CMAKE_CURRENT_BINARY_DIR}/header_check")
file(GLOB_RECURSE ZEROSYNC_PUBLIC_HEADERS CONFIGURE_DEPENDS RELATIVE "${CMAKE_CURRENT_SOURCE_DIR}/src"
     src/core/*.hpp src/backends/*.hpp src/kernels/*.hpp src/nn/*.hpp src/losses/*.hpp
     src/train/*.hpp src/rl/*.hpp)
# Only the compiled-in backend's headers: the other one's need its toolkit.
if(ZEROSYNC_HAS_CUDA)
  list(FILTER ZEROSYNC_PUBLIC_HEADERS EXCLUDE REGEX "^backends/host/")
else()
  list(FILTER ZEROSYNC_PUBLIC_HEADERS EXCLUDE REGEX "^backends/cuda/")
endif()

set(ZEROSYNC_HEADER_CHECK_SOURCES)
foreach(header IN LISTS ZEROSYNC_PUBLIC_HEADERS)
  string(MAKE_C_IDENTIFIER "${header}" name)
  set(source "${ZEROSYNC_HEADER_CHECK_DIR}/${name}.cpp")
  file(CONFIGURE OUTPUT "${source}" CONTENT "#include \"${header}\"\n#include \"${header}\"\n")
  list(APPEND ZEROSYNC_HEADER_CHECK_SOURCES "${source}")
endforeach()
add_library(zerosync_header_check OBJECT ${ZEROSYNC_HEADER_CHECK_SOURCES})
target_link_libraries(zerosync_header_check PRIVATE zerosync_lib)
