"""Stand-in of ``vllm.compilation``."""
