"""The learner's device machinery: staging rows to the device, metrics read lazily, captured
updates (CUDA graphs), and how much memory a learner's storage may take."""
