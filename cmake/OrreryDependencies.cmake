# Finds Orrery's third-party libraries (all from Debian) and wraps the ones without
# CMake packages in imported targets, so library folders name them uniformly:
#   orrery::cbc  orrery::cpprest  yaml-cpp  nlohmann_json::nlohmann_json
#   prometheus-cpp::pull  ICU::uc  orrery::torch (worker only)  GTest::gtest

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(yaml-cpp REQUIRED)
# ICU's character properties and NFC for the model tokenizer (worker/data/bpe.cc);
# 60 is the first with UTF-8 normalization.
find_package(ICU 60 REQUIRED COMPONENTS uc)

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
  # The GPU path (ORRERY_WITH_CUDA=AUTO|ON|OFF): CUDA headers and cudart, NCCL,
  # and a LibTorch built with CUDA (libtorch_cuda, c10_cuda, ProcessGroupNCCL).
  # Orrery compiles no kernels, so no nvcc and no CUDA language: the toolkit is
  # found from CUDA_HOME / NCCL_HOME (cache variables or environment), else
  # /usr/local/cuda, and Torch from Torch_DIR. scripts/cuda-toolkit installs all
  # three from the wheels on the Python package index and prints these flags.
  # Found before Torch: a CUDA LibTorch's config (Caffe2's public/cuda.cmake)
  # otherwise insists on nvcc; it skips that search when torch::cudart exists,
  # so the cudart found here is handed to it as that target.
  set(ORRERY_HAVE_CUDA OFF)
  if(NOT ORRERY_WITH_CUDA STREQUAL "OFF")
    set(_orrery_cuda_hints ${CUDA_HOME} $ENV{CUDA_HOME} $ENV{CUDA_PATH})
    set(_orrery_nccl_hints ${NCCL_HOME} $ENV{NCCL_HOME} ${_orrery_cuda_hints})
    find_path(ORRERY_CUDA_INCLUDE cuda_runtime_api.h HINTS ${_orrery_cuda_hints}
              PATHS /usr/local/cuda PATH_SUFFIXES include)
    find_library(ORRERY_CUDART_LIB cudart HINTS ${_orrery_cuda_hints}
                 PATHS /usr/local/cuda PATH_SUFFIXES lib64 lib)
    find_path(ORRERY_NCCL_INCLUDE nccl.h HINTS ${_orrery_nccl_hints}
              PATHS /usr/local/cuda PATH_SUFFIXES include)
    find_library(ORRERY_NCCL_LIB nccl HINTS ${_orrery_nccl_hints}
                 PATHS /usr/local/cuda PATH_SUFFIXES lib64 lib)
    if(ORRERY_CUDA_INCLUDE AND ORRERY_CUDART_LIB AND NOT TARGET torch::cudart)
      add_library(torch::cudart INTERFACE IMPORTED)
      set_target_properties(torch::cudart PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${ORRERY_CUDA_INCLUDE}"
        INTERFACE_LINK_LIBRARIES "${ORRERY_CUDART_LIB}")
    endif()
  endif()

  # LibTorch only reaches worker/ targets; the operator never sees it.
  find_package(Torch REQUIRED)
  add_library(orrery_torch INTERFACE)
  target_link_libraries(orrery_torch INTERFACE ${TORCH_LIBRARIES})
  # libstdc++ first in every torch binary's library search order. The CUDA
  # LibTorch wheels are built with a newer GCC than Debian's and export their own
  # copy of parts of std::filesystem (remove_all, ...), which call into symbols
  # Debian's libstdc++ lacks through weak references that resolve to address 0.
  # Link options come before the libraries on the link line, so libstdc++ is the
  # first DT_NEEDED entry and the dynamic linker binds std:: symbols there
  # (--no-as-needed: nothing references it yet at that point of the line).
  # Harmless with Debian's LibTorch, which exports no std:: symbols. Shown by
  # tests/worker/dist/device_test.cc (StandardLibraryTest).
  target_link_options(orrery_torch INTERFACE "LINKER:--push-state,--no-as-needed" "-lstdc++"
                      "LINKER:--pop-state")
  # Torch's headers are noisy under our warnings: mark them as system headers.
  target_include_directories(orrery_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  add_library(orrery::torch ALIAS orrery_torch)

  if(NOT ORRERY_WITH_CUDA STREQUAL "OFF")
    set(_orrery_cuda_missing)
    if(NOT TARGET torch_cuda)
      list(APPEND _orrery_cuda_missing "a LibTorch built with CUDA (Torch_DIR=${Torch_DIR})")
    endif()
    if(NOT ORRERY_CUDA_INCLUDE OR NOT ORRERY_CUDART_LIB)
      list(APPEND _orrery_cuda_missing "cuda_runtime_api.h and libcudart (CUDA_HOME)")
    endif()
    if(NOT ORRERY_NCCL_INCLUDE OR NOT ORRERY_NCCL_LIB)
      list(APPEND _orrery_cuda_missing "nccl.h and libnccl (NCCL_HOME)")
    endif()
    if(NOT _orrery_cuda_missing)
      set(ORRERY_HAVE_CUDA ON)
      # ProcessGroupNCCL.hpp includes nccl.h and the CUDA headers.
      target_include_directories(orrery_torch SYSTEM INTERFACE ${ORRERY_CUDA_INCLUDE}
                                 ${ORRERY_NCCL_INCLUDE})
    elseif(ORRERY_WITH_CUDA STREQUAL "ON")
      list(JOIN _orrery_cuda_missing "; " _orrery_cuda_missing)
      message(FATAL_ERROR "ORRERY_WITH_CUDA=ON but the GPU path lacks: ${_orrery_cuda_missing}. "
              "Configure with the flags `scripts/cuda-toolkit --cmake-args` prints, "
              "or use -DORRERY_WITH_CUDA=AUTO|OFF.")
    endif()
  endif()
  message(STATUS "Orrery GPU path (CUDA+NCCL): ${ORRERY_HAVE_CUDA}")
endif()
