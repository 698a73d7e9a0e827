"""A third credit-assignment method that lives only in the test tree: advantages scaled by a constant
factor after verl computes them. It exists to exercise the extension point (docs/architecture.md, "Adding
a method"): one folder, registered with the launcher from its own ``method`` module, run by
``python -m recipe.main method=scaled_advantage`` with ``RECIPE_METHOD_MODULES=scaled_advantage.method`` and
this folder's parent on ``PYTHONPATH`` (tests/e2e/test_third_method_cpu.py)."""
