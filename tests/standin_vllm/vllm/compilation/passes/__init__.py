"""Stand-in of ``vllm.compilation.passes``."""
