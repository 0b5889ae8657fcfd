# Included right after llama.cpp's project(): the Python bindings load only libllama and ggml, so skip llama.cpp's
# "common" library (and the HTTP library it pulls in), which llama-cpp-python forces on.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
