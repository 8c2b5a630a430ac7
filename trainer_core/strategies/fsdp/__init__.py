"""FSDP2: the model sharded over the ranks with ``fully_shard``. ``plugin`` holds its options
(``FullyShardedDataParallelPlugin``, in Accelerate's names), ``strategy`` the ``FSDP2Strategy``,
``checkpoint`` the sharded state files."""
