"""verl glue shared by every method: the hooked trainer (``trainer_base``), the copied-code manifest and
drift checks (``upstream``), the method registry and the pre-flight (``preflight``). docs/architecture.md."""
