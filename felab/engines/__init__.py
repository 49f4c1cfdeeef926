"""Real engines, offline: the tiny model the kit writes for llama.cpp and MLX."""
