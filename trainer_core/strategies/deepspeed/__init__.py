"""DeepSpeed ZeRO: the model trained through a DeepSpeed engine. ``plugin`` holds its options and
config (``DeepSpeedPlugin``), ``strategy`` the ``DeepSpeedStrategy`` and the engine-held optimizer
and scheduler, ``precision`` the engine's own mixed precision, ``placeholders`` the ``DummyOptim``
and ``DummyScheduler`` a config's "auto" sections stand for."""
