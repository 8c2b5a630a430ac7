"""What makes code written for Hugging Face Accelerate run on trainer_core unchanged: the
``accelerator.state`` view (``accelerator_state``), Accelerate's other names and ``profile()``
(``setup_names``), its kwargs handlers (``handlers``), its shared singletons set up alongside
(``interop``), the sharding ``accelerate launch`` chose (``launch_environment``) and its shuffle order
(``shuffle``). The rest of trainer_core does not depend on Accelerate."""
