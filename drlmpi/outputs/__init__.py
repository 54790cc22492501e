"""What a run writes into its directory: metrics.csv and the progress log, TensorBoard event
files, checkpoints, and summary.json."""
