"""Optional test and drill fixtures; they install nothing beyond tailscope's own dependencies.

Scripted ground-truth server (:mod:`.scripted_server`), raw-socket fault server (:mod:`.fault_server`), fuzz targets
(:mod:`.fuzzing`), the tiny-model builder (:mod:`.tiny_model`), the real-vLLM launcher (:mod:`.vllm`) and the
calibration corpus's locator (:mod:`.calibration`). Tests and benchmarks use them; no module of the library imports
them (an import-linter contract), so ``import tailscope`` never loads them. Example:
``python -m tailscope.testing.scripted_server --port 8011 --ttft-ms 50 --itl-ms 10``.
"""
