# `cmake --install`: the library's headers under include/zerosync/ (one folder per layer, as in
# src/; the program's src/app/ stays private), libzerosync.a, the zerosync program, and a CMake
# package so that find_package(zerosync) gives the imported target zerosync::zerosync.
include(CMakePackageConfigHelpers)

set(ZEROSYNC_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/zerosync")

foreach(layer core backends kernels nn losses train rl)
  install(DIRECTORY "src/${layer}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/zerosync"
          FILES_MATCHING PATTERN "*.hpp")
endforeach()

install(TARGETS zerosync_lib EXPORT zerosyncTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(TARGETS zerosync_cli RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
install(EXPORT zerosyncTargets NAMESPACE zerosync:: DESTINATION "${ZEROSYNC_INSTALL_CMAKEDIR}")

# The archive holds code compiled against this Kokkos and these headers' templates are compiled
# against the user's: the two must be one Kokkos, so the package asks for this exact version.
set(ZEROSYNC_KOKKOS_VERSION "${Kokkos_VERSION}")
set(ZEROSYNC_KOKKOSKERNELS_VERSION "${KokkosKernels_VERSION}")
configure_package_config_file(cmake/zerosyncConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/zerosyncConfig.cmake"
  INSTALL_DESTINATION "${ZEROSYNC_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/zerosyncConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/zerosyncConfig.cmake"
              "${CMAKE_CURRENT_BINARY_DIR}/zerosyncConfigVersion.cmake"
        DESTINATION "${ZEROSYNC_INSTALL_CMAKEDIR}")
