"""The project's native code: the C kernels (library) and the same as torch operators (ops)."""
