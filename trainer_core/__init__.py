"""trainer_core: an Accelerator that runs the same training code on 1 CPU, N CPUs and N GPUs."""
