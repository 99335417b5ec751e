"""``jaxnb.get_dataset_shard(name)``: each process's share of a run's datasets (Grain)."""
