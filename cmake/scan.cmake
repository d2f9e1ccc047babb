# The media scanner behind `adaptiveload scan`: its own library, adaptiveload_scan (src/scan/),
# so the core stays free of FFmpeg. It reads container and stream headers with FFmpeg's
# libavformat, libavcodec and libavutil (Debian: libavformat-dev libavcodec-dev libavutil-dev).
# AL_SCAN: AUTO builds it when pkg-config finds those libraries, ON requires them, OFF skips it.
# Without it the `scan` subcommand still exists and says how to enable it.
# Consumers (the CLI and the test binary) get the library and the define AL_HAVE_SCAN=1
# through a deferred link at the end of the top-level CMakeLists.txt, once they exist.
set(AL_SCAN AUTO CACHE STRING "Build the media scanner (needs FFmpeg dev packages): AUTO, ON or OFF")
set_property(CACHE AL_SCAN PROPERTY STRINGS AUTO ON OFF)

set(AL_HAVE_SCAN OFF)
if(NOT AL_SCAN STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(AL_FFMPEG QUIET IMPORTED_TARGET libavformat libavcodec libavutil)
  endif()
  if(AL_FFMPEG_FOUND)
    set(AL_HAVE_SCAN ON)
  elseif(AL_SCAN STREQUAL "ON")
    message(FATAL_ERROR "AL_SCAN=ON but pkg-config did not find libavformat, libavcodec and libavutil; "
                        "install libavformat-dev libavcodec-dev libavutil-dev pkg-config (scripts/install_deps.sh) "
                        "or use -DAL_SCAN=AUTO")
  endif()
endif()
message(STATUS "adaptiveload: media scanner (FFmpeg) ${AL_HAVE_SCAN}")

if(AL_HAVE_SCAN)
  find_package(Threads REQUIRED)
  file(GLOB AL_SCAN_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/scan/*.cpp)
  add_library(adaptiveload_scan STATIC ${AL_SCAN_SOURCES})
  target_include_directories(adaptiveload_scan PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(adaptiveload_scan PUBLIC adaptiveload_core PRIVATE PkgConfig::AL_FFMPEG Threads::Threads)
  target_compile_definitions(adaptiveload_scan INTERFACE AL_HAVE_SCAN=1)

  function(al_scan_link_consumers)
    foreach(t adaptiveload adaptiveload_tests)
      if(TARGET ${t})
        target_link_libraries(${t} PRIVATE adaptiveload_scan)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL al_scan_link_consumers)
endif()
