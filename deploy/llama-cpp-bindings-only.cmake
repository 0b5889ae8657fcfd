# Read right after llama.cpp's project() (README's install line: -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>).
# Compiles about 40% of what -DLLAVA_BUILD=OFF alone compiles (docs/models.md).

# llama-cpp-python forces llama.cpp's "common" library on (and with it an HTTP library); its bindings load only
# libllama and ggml.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)

# llamafile's tinyBLAS kernels (one large template file) speed up F32/F16/Q8_0/Q4_0 matrix products, not the Q4_1
# weights of SmolLM2-135M that the local model serves; ggml's own kernels do the rest.
set(GGML_LLAMAFILE OFF CACHE BOOL "ggml: use LLAMAFILE" FORCE)
