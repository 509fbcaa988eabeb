"""One training run and what it leaves behind: ``train`` (``jra.train``), ``evaluate`` and
``evaluate_host``, the run directory's ``checkpoint``, ``sinks`` (metrics), ``tracking``
(Weights & Biases), ``config_files``, the ``compile_cache``, and ``distributed`` (several
processes)."""
