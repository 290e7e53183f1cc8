# Finds Orrery's third-party libraries (all from Debian) and wraps the ones without
# CMake packages in imported targets, so library folders name them uniformly:
#   orrery::cbc  orrery::cpprest  yaml-cpp  nlohmann_json::nlohmann_json
#   prometheus-cpp::pull  orrery::torch (worker only)  GTest::gtest

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(yaml-cpp REQUIRED)

pkg_check_modules(CBC REQUIRED IMPORTED_TARGET cbc)
add_library(orrery::cbc ALIAS PkgConfig::CBC)

find_package(cpprestsdk REQUIRED)
find_package(OpenSSL REQUIRED)
add_library(orrery_cpprest INTERFACE)
# cpprestsdk's package does not carry OpenSSL and Boost's system library on Debian.
target_link_libraries(orrery_cpprest INTERFACE cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto Threads::Threads)
add_library(orrery::cpprest ALIAS orrery_cpprest)

find_package(prometheus-cpp CONFIG REQUIRED)

if(ORRERY_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

if(ORRERY_WITH_TORCH)
  # LibTorch only reaches worker/ targets; the operator never sees it.
  find_package(Torch REQUIRED)
  add_library(orrery_torch INTERFACE)
  target_link_libraries(orrery_torch INTERFACE ${TORCH_LIBRARIES})
  # Torch's headers are noisy under our warnings: mark them as system headers.
  target_include_directories(orrery_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  add_library(orrery::torch ALIAS orrery_torch)

  set(ORRERY_HAVE_CUDA OFF)
  if(NOT ORRERY_WITH_CUDA STREQUAL "OFF")
    include(CheckLanguage)
    check_language(CUDA)
    find_path(ORRERY_NCCL_INCLUDE nccl.h HINTS ENV NCCL_HOME PATH_SUFFIXES include)
    find_library(ORRERY_NCCL_LIB nccl HINTS ENV NCCL_HOME PATH_SUFFIXES lib)
    if(CMAKE_CUDA_COMPILER AND ORRERY_NCCL_INCLUDE AND ORRERY_NCCL_LIB)
      set(ORRERY_HAVE_CUDA ON)
    elseif(ORRERY_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "ORRERY_WITH_CUDA=ON but no CUDA toolkit with NCCL was found; set NCCL_HOME or use -DORRERY_WITH_CUDA=OFF")
    endif()
  endif()
  message(STATUS "Orrery GPU path (CUDA+NCCL): ${ORRERY_HAVE_CUDA}")
endif()
