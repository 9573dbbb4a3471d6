//! Exact reproductions of torch's two TORCH_CUDA_ARCH_LIST parsers.
