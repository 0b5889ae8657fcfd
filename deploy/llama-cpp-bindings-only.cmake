# Read right after llama.cpp's project() (README's install line: -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>).
# Compiles about 40% of what -DLLAVA_BUILD=OFF alone compiles, for the x86-64 baseline (docs/models.md).

# llama-cpp-python forces llama.cpp's "common" library on (and with it an HTTP library); its bindings load only
# libllama and ggml.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)

# llamafile's tinyBLAS kernels (one large template file) speed up F32/F16/Q8_0/Q4_0 matrix products, not the Q4_1
# weights of SmolLM2-135M that the local model serves; ggml's own kernels do the rest.
set(GGML_LLAMAFILE OFF CACHE BOOL "ggml: use LLAMAFILE" FORCE)

# Portable: ggml's default build is -march=native, whose AVX-512/AMX kernels crashed on a recent Xeon, and a library
# built for one machine's extensions dies on a CPU without them. Here ggml gets an explicit instruction set instead:
# x86-64-v3 (AVX, AVX2, FMA, F16C, BMI2: every x86-64 CPU since about 2015) when the building CPU has all of it, else
# the x86-64 baseline (SSE2; about 6x slower on prompts); never AVX-512, AVX-VNNI or AMX. Measured costs and the start-up
# self-test that names a library this CPU cannot run: docs/models.md, "A portable build".
set(GGML_NATIVE OFF CACHE BOOL "ggml: optimize the build for the current system" FORCE)
foreach(instruction_set AVX_VNNI AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16)
  set(GGML_${instruction_set} OFF CACHE BOOL "ggml: enable ${instruction_set}" FORCE)
endforeach()
set(_combee_x86_64_v3 OFF)
if(EXISTS "/proc/cpuinfo")
  file(STRINGS "/proc/cpuinfo" _combee_cpu_flags REGEX "^flags" LIMIT_COUNT 1)
  set(_combee_x86_64_v3 ON)
  foreach(flag avx avx2 fma f16c bmi2)
    if(NOT _combee_cpu_flags MATCHES "[ \t]${flag}([ \t]|$)")
      set(_combee_x86_64_v3 OFF)
    endif()
  endforeach()
endif()
message(STATUS "combee: ggml for x86-64-v3 (AVX2, FMA, F16C): ${_combee_x86_64_v3}; AVX-512, AVX-VNNI, AMX: OFF")
foreach(instruction_set SSE42 AVX AVX2 BMI2 FMA F16C)
  set(GGML_${instruction_set} ${_combee_x86_64_v3} CACHE BOOL "ggml: enable ${instruction_set}" FORCE)
endforeach()
