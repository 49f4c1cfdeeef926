"""The tiny model: a random-weight Llama the kit writes offline, for llama.cpp and MLX (build.py).

    python -m felab.tiny_model DIR     # or: make tiny-model (DIR: .tools/tiny-model)

Not to be confused with felab/engine_families/, the registry of the engines themselves.
"""
