"""The local model server (``combee model serve``): llama.cpp's OpenAI-compatible server with SmolLM2."""
