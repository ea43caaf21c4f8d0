"""A stand-in of the parts of vLLM that fxrewrite's vLLM integration meets,
for tests on machines without vLLM (CI has none). Put its parent folder on
``sys.path`` only in a spawned child: ``fxrewrite.vllm`` decides once, at
import, whether vLLM's ``InductorPass`` is there."""
