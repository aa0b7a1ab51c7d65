"""``trace run``: the whole TRACE loop driven by one config (see docs/pipeline.md)."""
