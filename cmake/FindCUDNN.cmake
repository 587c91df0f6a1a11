# Finds cuDNN next to the CUDA toolkit; defines CUDNN::CUDNN and CUDNN_VERSION.
find_package(CUDAToolkit QUIET)
# CUDNN_ROOT (variable or environment) may name a cuDNN wheel's folder (nvidia/cudnn in a
# Python site folder, as PyTorch installs it), whose library has only its versioned name.
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
  HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _v REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*CUDNN_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1" _pat "${_v}")
  set(CUDNN_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::CUDNN)
  add_library(CUDNN::CUDNN UNKNOWN IMPORTED)
  set_target_properties(CUDNN::CUDNN PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
