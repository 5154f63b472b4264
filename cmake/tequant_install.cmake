include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tequant EXPORT tequant-targets FILE_SET HEADERS)
# The headers that need a third-party library are not in the verified header set; install them too.
install(DIRECTORY include/tequant DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
install(EXPORT tequant-targets NAMESPACE tequant:: DESTINATION ${CMAKE_INSTALL_DATADIR}/cmake/tequant)
if(TARGET tequant_cuda)
  install(TARGETS tequant_cuda EXPORT tequant-cuda-targets FILE_SET HEADERS)
  install(EXPORT tequant-cuda-targets NAMESPACE tequant:: DESTINATION ${CMAKE_INSTALL_DATADIR}/cmake/tequant)
endif()
configure_package_config_file(cmake/tequant-config.cmake.in ${PROJECT_BINARY_DIR}/tequant-config.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_DATADIR}/cmake/tequant)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tequant-config-version.cmake
                                 COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/tequant-config.cmake ${PROJECT_BINARY_DIR}/tequant-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_DATADIR}/cmake/tequant)
