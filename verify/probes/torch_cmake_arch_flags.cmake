# Runs torch's own CMake arch parser (CUDA_SELECT_NVCC_ARCH_FLAGS from the select_compute_arch.cmake
# that the torch wheel ships) on one list and prints the result, for archsmith's side-by-side tests.
#
#   cmake -DTORCH_CMAKE_MODULE=<path to select_compute_arch.cmake> -DCUDA_VERSION=13.2 \
#         -DARCH_LIST=<TORCH_CUDA_ARCH_LIST> -P torch_cmake_arch_flags.cmake
#
# Prints "FLAGS=<flags joined by |>" and "READABLE=<readable>" on stdout; torch's errors go to stderr
# and make cmake exit non-zero.
include("${TORCH_CMAKE_MODULE}")
# torch calls it unquoted (public/utils.cmake), so `;` splits the list into arguments.
cuda_select_nvcc_arch_flags(flags ${ARCH_LIST})
string(REPLACE ";" "|" joined "${flags}")
message(STATUS "FLAGS=${joined}")
message(STATUS "READABLE=${flags_readable}")
