"""Metric families: the one protocol of built-in and plugin metrics (:mod:`.protocol`),
the built-in catalogs (:mod:`.catalog`, :mod:`.npv`, :mod:`.top_k`), the registry
generated from them (:mod:`.registry`) and the bootstrap interval helper
(:mod:`.bootstrap`). Pure: no I/O."""
